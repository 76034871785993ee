//! A record's content: the forms a user gives it in, and the bytes each form stands for.

use std::borrow::Cow;
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use xxhash_rust::xxh3::Xxh3;

use crate::encode::{blocks, decode_base64_into, IN_BLOCK};
use crate::error::{Error, RecordErrorKind, Result};
use crate::jsonl::FileBudget;
use crate::wide::Wide;

use super::is_textual;

/// A record's content, as the user gave it. Borrowed where it can be: contents are the bulk of
/// a corpus, and copying them costs more than encoding them.
#[derive(Clone, Debug)]
pub enum Content<'a> {
    /// Text: sent as XML text when XML can carry it.
    Text(Cow<'a, str>),
    /// Text as a Python `str` holds it, made UTF-8 on a worker thread.
    Wide(Wide<'a>),
    /// Binary: always base64, maybe compressed.
    Bytes(Cow<'a, [u8]>),
    /// Binary the user gave in base64 (`content_base64`); decoded on a worker thread.
    Base64(Cow<'a, str>),
    /// A file read at build time (`content_path`).
    Path(PathBuf),
}

impl Content<'_> {
    pub(super) fn field(&self) -> &'static str {
        match self {
            Content::Text(_) | Content::Wide(_) | Content::Bytes(_) => "content",
            Content::Base64(_) => "content_base64",
            Content::Path(_) => "content_path",
        }
    }

    /// About how much work encoding this content is; a file's size is not known before it is
    /// read, so a typical document's stands for it.
    pub(super) fn weight(&self) -> usize {
        match self {
            Content::Text(s) | Content::Base64(s) => s.len(),
            Content::Wide(w) => w.units(),
            Content::Bytes(b) => b.len(),
            Content::Path(_) => 16 * 1024,
        }
    }

    /// The bytes to send, and their text when they may travel as XML text. `buf` receives
    /// decoded base64, a file's bytes or text made UTF-8. `opened` is the file the planning
    /// threads opened for this record, if any (see `OpenedFile`).
    pub(crate) fn resolve<'s>(
        &'s self,
        index: usize,
        mimetype: &str,
        buf: &'s mut Vec<u8>,
        opened: Option<OpenedFile>,
    ) -> Result<(&'s [u8], Option<&'s str>)> {
        let field = self.field();
        Ok(match self {
            Content::Text(s) => (s.as_bytes(), Some(s)),
            Content::Wide(w) => {
                let text = match w.ascii() {
                    Some(ascii) => ascii,
                    None => w.to_utf8(buf).map_err(|_| {
                        Error::record(
                            index,
                            Some(field),
                            "is not valid Unicode (it holds a lone surrogate)",
                        )
                    })?,
                };
                (text.as_bytes(), Some(text))
            }
            Content::Bytes(b) => (b, None),
            Content::Base64(s) => {
                decode_base64_into(s, buf).map_err(|m| Error::record(index, Some(field), m))?;
                (buf, None)
            }
            Content::Path(p) => {
                let unread = |u: Unread| u.into_error(index);
                let (file, id) = open_planned(p, opened).map_err(unread)?;
                read_content_file(&file, id, p, buf).map_err(unread)?;
                (buf, file_text(mimetype, buf))
            }
        })
    }

    /// The bytes to send, as `resolve` gives them, except that a file larger than a block is
    /// left open to be read a block at a time: one 900 MB file is never held whole.
    pub(crate) fn source<'s>(
        &'s self,
        index: usize,
        mimetype: &str,
        buf: &'s mut Vec<u8>,
        opened: Option<OpenedFile>,
    ) -> Result<Source<'s>> {
        let Content::Path(path) = self else {
            let (bytes, text) = self.resolve(index, mimetype, buf, None)?;
            return Ok(Source::Memory { bytes, text });
        };
        let unread = |u: Unread| u.into_error(index);
        let (file, id) = open_planned(path, opened).map_err(unread)?;
        if id.size > IN_BLOCK as u64 {
            return Ok(Source::File(FileSource {
                file,
                opened: id,
                first: None,
                path,
                index,
                textual: is_textual(mimetype),
                block: buf,
            }));
        }
        read_content_file(&file, id, path, buf).map_err(unread)?;
        let text = file_text(mimetype, buf);
        Ok(Source::Memory { bytes: buf, text })
    }
}

/// A file's bytes as text: when its type says so and its bytes are UTF-8.
fn file_text<'b>(mimetype: &str, bytes: &'b [u8]) -> Option<&'b str> {
    is_textual(mimetype)
        .then(|| std::str::from_utf8(bytes).ok())
        .flatten()
}

/// A content's bytes where the encoding reads them: in memory, or in a file read a block
/// (`IN_BLOCK`) at a time, from its start again for each encoding tried.
pub(crate) enum Source<'s> {
    /// With their text when they may travel as XML text.
    Memory {
        bytes: &'s [u8],
        text: Option<&'s str>,
    },
    File(FileSource<'s>),
}

pub(crate) struct FileSource<'s> {
    file: File,
    /// What it was when it was opened (its size, which every read must find), which it must
    /// still be after every read.
    opened: Identity,
    /// The hash of the bytes of the first read to its end, which every later one must match:
    /// a file rewritten in place at the same size (and within the clock's resolution) would
    /// otherwise give a record that mixes two versions.
    first: Option<u64>,
    path: &'s Path,
    /// The record's, for errors.
    index: usize,
    /// Whether its type is a text type: then it is text if its bytes are UTF-8, which is known
    /// once they are all read.
    textual: bool,
    /// The block read last.
    block: &'s mut Vec<u8>,
}

impl Source<'_> {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Source::Memory { bytes, .. } => bytes.len() as u64,
            Source::File(f) => f.opened.size,
        }
    }

    /// Whether this is a file whose record leaves memory once encoded, whatever it encodes to
    /// (see `spill::BIG_FILE`).
    pub(crate) fn leaves_memory(&self) -> bool {
        matches!(self, Source::File(_)) && self.len() >= crate::spill::BIG_FILE
    }

    /// Whether the bytes may travel as XML text, if known before they are read.
    pub(crate) fn is_text(&self) -> Option<bool> {
        match self {
            Source::Memory { text, .. } => Some(text.is_some()),
            Source::File(f) => (!f.textual).then_some(false),
        }
    }

    /// Refuses a file whose content would be `encoded` bytes in the feed, more than any feed
    /// file can hold: before it is written, not after.
    pub(crate) fn fits(&self, encoded: u64) -> Result<()> {
        let limit = crate::limits::HARD_MAX_BYTES;
        match self {
            Source::File(f) if encoded > limit => Err(Error::refused(
                RecordErrorKind::TooLarge,
                f.index,
                Some("content_path"),
                format!(
                    "{} would be {encoded} bytes in base64, which no feed under the protocol's \
                     1 GB limit can hold (ceiling {limit} bytes); send it as a web feed URL \
                     instead",
                    f.path.display()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The first bytes: a block, or all of them.
    pub(crate) fn head(&mut self) -> Result<&[u8]> {
        match self {
            Source::Memory { bytes, .. } => Ok(bytes),
            Source::File(f) => {
                f.rewind()?;
                f.read_block(f.opened.size.min(IN_BLOCK as u64))?;
                f.check_identity()?;
                Ok(f.block)
            }
        }
    }

    /// Hands the bytes to `each` from the start, a block (`IN_BLOCK`) at a time, the last one
    /// flagged, until `each` answers false. A file that is no longer the size it had when it
    /// was opened, or whose bytes are not those of its first read, is an error, never a short
    /// or mixed content.
    pub(crate) fn blocks(
        &mut self,
        mut each: impl FnMut(&[u8], bool) -> Result<bool>,
    ) -> Result<()> {
        match self {
            Source::Memory { bytes, .. } => {
                for (block, last) in blocks(bytes) {
                    if !each(block, last)? {
                        break;
                    }
                }
                Ok(())
            }
            Source::File(f) => {
                f.rewind()?;
                let mut hash = Xxh3::new();
                let mut at = 0;
                loop {
                    let len = (f.opened.size - at).min(IN_BLOCK as u64);
                    f.read_block(len)?;
                    hash.update(f.block);
                    at += len;
                    let last = at == f.opened.size;
                    if last {
                        f.check_end()?;
                        f.check_identity()?;
                        f.check_same(hash.digest())?;
                    }
                    if !each(f.block, last)? || last {
                        return Ok(());
                    }
                }
            }
        }
    }
}

impl Source<'_> {
    /// `blocks` to the end, learning on the way whether the bytes may travel as text (for a
    /// file of a text type: whether they are UTF-8); returns that.
    pub(crate) fn blocks_and_text(
        &mut self,
        mut each: impl FnMut(&[u8], bool) -> Result<()>,
    ) -> Result<bool> {
        let known = self.is_text();
        let mut utf8 = known.is_none().then(Utf8Blocks::default);
        let mut valid = true;
        self.blocks(|block, last| {
            if let (Some(check), true) = (&mut utf8, valid) {
                valid = check.push(block, last, |_| Ok(())).is_ok();
            }
            each(block, last)?;
            Ok(true)
        })?;
        Ok(known.unwrap_or(valid))
    }
}

impl FileSource<'_> {
    fn refuse(&self, message: String) -> Error {
        Unread::Refused(message).into_error(self.index)
    }

    fn cannot(&self, e: std::io::Error) -> Error {
        cannot_read(self.path, e).into_error(self.index)
    }

    /// Checks that the file is still what it was when it was opened.
    fn check_identity(&self) -> Result<()> {
        let now = self.file.metadata().map_err(|e| self.cannot(e))?;
        if Identity::of(&now) != self.opened {
            return Err(self.refuse(changed(self.path)));
        }
        Ok(())
    }

    /// Checks that a read to the end, whose bytes hash to `hash`, read the first read's bytes.
    fn check_same(&mut self, hash: u64) -> Result<()> {
        match self.first {
            Some(first) if first != hash => Err(self.refuse(changed(self.path))),
            _ => {
                self.first = Some(hash);
                Ok(())
            }
        }
    }

    fn rewind(&mut self) -> Result<()> {
        self.file
            .seek(SeekFrom::Start(0))
            .map(drop)
            .map_err(|e| self.cannot(e))
    }

    /// Reads the next `len` bytes into the block.
    fn read_block(&mut self, len: u64) -> Result<()> {
        self.block.clear();
        self.block.reserve(len as usize);
        (&self.file)
            .take(len)
            .read_to_end(self.block)
            .map_err(|e| self.cannot(e))?;
        if (self.block.len() as u64) < len {
            return Err(self.refuse(changed_size(self.path, self.opened.size, "shrank")));
        }
        Ok(())
    }

    /// Checks that the file ends where it ended when it was opened.
    fn check_end(&mut self) -> Result<()> {
        let mut more = [0u8];
        match self.file.read(&mut more) {
            Ok(0) => Ok(()),
            Ok(_) => Err(self.refuse(changed_size(self.path, self.opened.size, "grew"))),
            Err(e) => Err(self.cannot(e)),
        }
    }
}

/// The text of bytes given in blocks, as they come: a character cut between two blocks is put
/// together.
#[derive(Default)]
pub(crate) struct Utf8Blocks {
    cut: [u8; 4],
    len: usize,
}

impl Utf8Blocks {
    /// Hands the text of the next block to `f`, in pieces (a character cut at its end waits for
    /// the next block); fails when the bytes are not UTF-8, or when `f` does.
    pub(crate) fn push(
        &mut self,
        mut block: &[u8],
        last: bool,
        mut f: impl FnMut(&str) -> std::result::Result<(), ()>,
    ) -> std::result::Result<(), ()> {
        if self.len > 0 {
            // A lead byte that began a valid, cut character.
            let width = match self.cut[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (width - self.len).min(block.len());
            self.cut[self.len..self.len + take].copy_from_slice(&block[..take]);
            self.len += take;
            block = &block[take..];
            if self.len < width {
                return if last { Err(()) } else { Ok(()) };
            }
            f(std::str::from_utf8(&self.cut[..width]).map_err(drop)?)?;
            self.len = 0;
        }
        match simdutf8::compat::from_utf8(block) {
            Ok(text) => f(text),
            Err(e) if e.error_len().is_none() && !last => {
                let (whole, cut) = block.split_at(e.valid_up_to());
                self.cut[..cut.len()].copy_from_slice(cut);
                self.len = cut.len();
                // SAFETY: simdutf8 found the bytes before `valid_up_to` valid UTF-8.
                f(unsafe { std::str::from_utf8_unchecked(whole) })
            }
            Err(_) => Err(()),
        }
    }
}

/// Why a file is refused when it is no longer the size it had when it was opened: what was
/// read is not the document, and a short read would send a shorter one.
fn changed_size(path: &Path, size: u64, how: &str) -> String {
    format!(
        "{} {how} while it was read ({size} bytes when opened): it is not sent part read; build \
         again once it is complete",
        path.display()
    )
}

/// Why a file's bytes changed between two of its reads, though not its size.
fn changed(path: &Path) -> String {
    format!(
        "{} changed while it was read: it is not sent part old, part new; build again once it is \
         complete",
        path.display()
    )
}

/// What a file is, as fstat tells: a read that finds it otherwise read bytes of two versions.
/// Not its ctime: a rename or unlink changes it, not the bytes, and a file moved away while
/// it is read is still read whole from its descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Identity {
    fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Identity {
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// Why a `content_path` file was not read.
enum Unread {
    /// The file's fault: its record is refused with this message.
    Refused(String),
    /// The build's: the process is out of descriptors or memory, and the file may be fine. The
    /// build stops, naming the cause: refusing the record would set a good document aside.
    Build(Error),
}

impl Unread {
    fn into_error(self, index: usize) -> Error {
        match self {
            Unread::Refused(m) => {
                Error::refused(RecordErrorKind::Unreadable, index, Some("content_path"), m)
            }
            Unread::Build(e) => e,
        }
    }
}

/// An error opening or reading `path`, as `Unread`.
fn cannot_read(path: &Path, e: std::io::Error) -> Unread {
    #[cfg(target_os = "linux")]
    let build = matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    );
    #[cfg(not(target_os = "linux"))]
    let build = false;
    if build {
        return Unread::Build(Error::io(path, e));
    }
    Unread::Refused(format!("cannot read {}: {e}", path.display()))
}

/// The file the planning threads opened for `path`, or `path` opened now.
fn open_planned(
    path: &Path,
    opened: Option<OpenedFile>,
) -> std::result::Result<(File, Identity), Unread> {
    match opened.filter(|o| o.path == path) {
        Some(o) => Ok(o.into_parts()),
        None => open_content_file(path),
    }
}

/// Opens a `content_path` file and takes its size: only a regular file (a FIFO would block
/// the build, a device never end), and no larger than the hard ceiling on a feed file, which no
/// content larger can fit under.
fn open_content_file(path: &Path) -> std::result::Result<(File, Identity), Unread> {
    let cannot = |e| cannot_read(path, e);
    // Opening a FIFO for reading waits for a writer: O_NONBLOCK returns at once, and fstat then
    // tells what it is. It changes nothing for a regular file's reads.
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(Unread::Refused(format!(
            "{} is not a regular file (a FIFO, socket or device)",
            path.display()
        )));
    }
    let limit = crate::limits::HARD_MAX_BYTES;
    if meta.len() > limit {
        return Err(Unread::Refused(format!(
            "{} is {} bytes, more than a feed file can hold ({limit}): feed its URL in a web \
             feed instead",
            path.display(),
            meta.len()
        )));
    }
    Ok((file, Identity::of(&meta)))
}

/// The size `open_content_file` would take of `path`, read by its name: 0 where it would refuse
/// the file (its read will say why).
fn size_by_name(path: &Path) -> u64 {
    std::fs::metadata(path)
        .ok()
        .filter(|meta| meta.is_file() && meta.len() <= crate::limits::HARD_MAX_BYTES)
        .map_or(0, |meta| meta.len())
}

/// Reads an open `content_path` file of `size` bytes into `buf`, all of it: a file that is no
/// longer that size, or no longer what it was when it was opened, is refused, never sent short
/// or mixed. A size of 0 is read to its end (up to the hard ceiling), as the files of `/proc`
/// say 0 whatever they hold; but it too must still be what it was when opened: a file of
/// `/proc` stays so, while a file empty when opened and written since does not (the read found
/// part of it, or bytes the plan did not count), which is checked before it is read too: a file
/// written since would be read to the ceiling, on each encoding thread, only to be refused.
fn read_content_file(
    file: &File,
    opened: Identity,
    path: &Path,
    buf: &mut Vec<u8>,
) -> std::result::Result<(), Unread> {
    let cannot = |e| cannot_read(path, e);
    let size = opened.size;
    let limit = crate::limits::HARD_MAX_BYTES;
    buf.clear();
    if size == 0 {
        still_as_opened(file, opened, path)?;
    }
    buf.reserve(size as usize);
    let most = if size == 0 { limit } else { size };
    // From its start: another read of the same opening (the fingerprint's) may have moved on.
    let mut file = file;
    file.seek(SeekFrom::Start(0)).map_err(cannot)?;
    file.take(most + 1).read_to_end(buf).map_err(cannot)?;
    let read = buf.len() as u64;
    if size == 0 && read > limit {
        return Err(Unread::Refused(format!(
            "{} grew past {limit} bytes while it was read",
            path.display()
        )));
    }
    if size > 0 && read != size {
        return Err(Unread::Refused(changed_size(
            path,
            size,
            if read < size { "shrank" } else { "grew" },
        )));
    }
    still_as_opened(file, opened, path)
}

/// Refuses an open `content_path` file that is no longer what it was when it was `opened`.
fn still_as_opened(file: &File, opened: Identity, path: &Path) -> std::result::Result<(), Unread> {
    let now = file.metadata().map_err(|e| cannot_read(path, e))?;
    if Identity::of(&now) != opened {
        return Err(Unread::Refused(changed(path)));
    }
    Ok(())
}

/// A `content_path` file the planning threads opened (see `read_ahead`), handed to the thread
/// that encodes its record, so that each file is opened once: on a network or FUSE file system
/// every open is a round trip, and FUSE drops a file's cached pages when it is opened again
/// (the pages read ahead with them). Closed when dropped.
pub struct OpenedFile {
    path: PathBuf,
    file: File,
    opened: Identity,
    _held: Held,
}

impl OpenedFile {
    /// Another descriptor of the same opening, for another read of the record (its
    /// fingerprint's), which then finds the file as the encoding does; none if the process is
    /// out of descriptors (that read opens the file itself).
    pub(crate) fn try_clone(&self) -> Option<OpenedFile> {
        let file = self.file.try_clone().ok()?;
        Some(OpenedFile {
            path: self.path.clone(),
            file,
            opened: self.opened,
            _held: self._held.another(),
        })
    }

    /// The file and what it was when opened, for its read: no longer counted among the files
    /// held ahead (what is being read is one a thread).
    fn into_parts(self) -> (File, Identity) {
        (self.file, self.opened)
    }
}

/// One of the files counted in a count of held files (`HELD`), until dropped.
struct Held(&'static AtomicUsize);

impl Held {
    /// One more file counted in `count`, if it counts fewer than `most`.
    fn within(count: &'static AtomicUsize, most: usize) -> Option<Held> {
        count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()
            .map(|_| Held(count))
    }

    /// One more file counted with this one.
    fn another(&self) -> Held {
        self.0.fetch_add(1, Ordering::Relaxed);
        Held(self.0)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Files held open between their planning and their read, across all builds of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The most files held open so (`held` of them are): a quarter of the descriptors the process
/// has free, under its limit (RLIMIT_NOFILE, often 1,024) less those it holds besides, so that
/// the user's own files and sockets, the encoding threads' files and the feed files always have
/// room. A quarter of the limit, whatever the caller held already, ran the encoding threads out
/// of descriptors where the caller held most: the build stopped with EMFILE. A file planned
/// past it is closed once asked ahead, and opened again by its encoding thread.
fn max_held(held: &AtomicUsize) -> usize {
    match open_file_limit() {
        Some(limit) => held_within(limit, others_open(held)),
        None => 256,
    }
}

/// The process's limit on open files (the soft RLIMIT_NOFILE, often 1,024): no descriptor is
/// numbered at or above it. `None` where it cannot be known.
pub(crate) fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only fills the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            return Some(limit.rlim_cur);
        }
    }
    None
}

/// A quarter of the descriptors free under `limit` when `others` are open, up to 4,096.
fn held_within(limit: u64, others: usize) -> usize {
    (limit.saturating_sub(others as u64) / 4).min(4096) as usize
}

/// How often the descriptors open are counted, at most: a plan asks for `max_held` at each
/// batch of files it opens (from 1 file on), and a count lists /proc/self/fd, which took
/// 11 µs for a process holding 10 descriptors, 0.4 ms for 1,000 (from Python), 15 ms for
/// 18,000. The next count waits `RECOUNT`, or 20 times what the last listing took if longer,
/// so that listing takes at most 5% of the time: recounting every 10 ms with 18,000 held, a
/// build by path of 45,000 records took 0.49 s, not 0.29 (now 0.29).
const RECOUNT: std::time::Duration = std::time::Duration::from_millis(10);

/// When a count whose listing took `took` is recounted, after it.
#[cfg(target_os = "linux")]
fn recount_after(took: std::time::Duration) -> std::time::Duration {
    RECOUNT.max(took * 20)
}

/// The descriptors the process holds open besides the `held` files held ahead (and the one that
/// lists them), as counted at most `recount_after` ago.
#[cfg(target_os = "linux")]
fn others_open(held: &AtomicUsize) -> usize {
    use std::time::Instant;
    static LAST: Mutex<Option<(Instant, usize)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if let Some((until, others)) = *last {
        if now < until {
            return others;
        }
    }
    let others = others_listed(
        std::fs::read_dir("/proc/self/fd"),
        held.load(Ordering::Relaxed),
    );
    *last = Some((now + recount_after(now.elapsed()), others));
    others
}

/// The descriptors open besides `held` and the listing's own, from a listing of the process's
/// descriptors. A listing refused for want of a descriptor (EMFILE, ENFILE) leaves none free;
/// one that fails otherwise (no /proc mounted) counts none open: a quarter of the limit.
#[cfg(target_os = "linux")]
fn others_listed(listing: std::io::Result<std::fs::ReadDir>, held: usize) -> usize {
    match listing {
        Ok(open) => open.count().saturating_sub(1 + held),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => usize::MAX,
        Err(_) => 0,
    }
}

/// Elsewhere, not counted: a quarter of the limit.
#[cfg(not(target_os = "linux"))]
fn others_open(_: &AtomicUsize) -> usize {
    0
}

/// Threads that open the files a chunk names and ask the kernel to read them ahead, at most
/// one per this many files. Opening a file on a cold cache waits for the disk (its directory
/// entry, its inode), and the encoding threads read one file each at a time: with the files
/// asked for here first, the disk has many reads in flight whatever the number of encoding
/// threads. Plain threads of their own, not a pool's: idle pool threads spin a while before
/// they sleep, and did so after every chunk, on the cores the encoding needs (0.1 s of CPU a
/// 300 MB build).
const FILES_PER_THREAD: usize = 32;
/// And at most this many.
const READ_THREADS: usize = 16;
/// The most asked of one file ahead of its read: the kernel's own read-ahead follows a
/// sequential read from there, so a huge file does not flood the page cache.
const READ_AHEAD_FILE: u64 = 8 << 20;
/// The most asked of one chunk's files ahead: pages read ahead and evicted before they are
/// read would be read twice.
const READ_AHEAD_CHUNK: u64 = 256 << 20;

/// Opens the files, many at a time, asks the kernel to read the start of each ahead, and
/// returns each file's size (0 for what cannot be opened or is not a regular file: its read
/// will say why) and the file opened, while the process holds few enough (see `max_held`).
/// Its threads may wait for the disk. The files are taken in order while they fit in `budget`
/// (if given): the result is the first files only, those taken. A file is opened only while
/// it and those being opened would likely fit, each guessed as big as the files taken on
/// average (`FileBudget::room_for`); the round's first is always opened. A file opened past the
/// budget is closed and opened again in the next round, a round trip more on a network file
/// system: 16 threads opening the next file regardless opened 377 files for 300.
pub(crate) fn read_ahead(
    paths: &[&Path],
    budget: Option<FileBudget>,
) -> Vec<(u64, Option<OpenedFile>)> {
    read_ahead_counted(paths, budget, &HELD, max_held(&HELD))
}

/// `read_ahead`, with the files held counted in `held` (a test's own count: the process's is
/// shared by every test running beside it), at most `most` of them.
fn read_ahead_counted(
    paths: &[&Path],
    budget: Option<FileBudget>,
    held: &'static AtomicUsize,
    most: usize,
) -> Vec<(u64, Option<OpenedFile>)> {
    let ahead = AtomicU64::new(READ_AHEAD_CHUNK);
    let state = Mutex::new(Ahead {
        left: budget,
        next: 0,
        opening: 0,
        stopped: false,
    });
    let done_one = Condvar::new();
    let opened: Vec<OnceLock<(u64, Option<OpenedFile>)>> =
        paths.iter().map(|_| OnceLock::new()).collect();
    let one = |path: &Path| {
        let slot = Held::within(held, most);
        // With few descriptors free, a file past the bound is not even opened to be read ahead:
        // the threads opening them would take those the encoding threads need.
        let file = match slot.is_some() || most >= READ_THREADS {
            true => open_content_file(path).ok(),
            false => None,
        };
        // Its size, all the plan needs of a file not opened, read by its name: as 0, a round
        // took every file the process had no descriptor for (400 MB of records held at once).
        let Some((file, opened)) = file else {
            return (size_by_name(path), None);
        };
        let size = opened.size;
        let len = size.min(READ_AHEAD_FILE);
        let granted = ahead
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(len)
            })
            .is_ok();
        if granted && len > 0 {
            will_need(&file, len);
        }
        let file = slot.map(|slot| OpenedFile {
            path: path.to_owned(),
            file,
            opened,
            _held: slot,
        });
        (size, file)
    };
    // Each thread takes the next file not taken yet, until told to stop: every file before
    // one taken is taken.
    let claim = || {
        let mut plan = state.lock().unwrap_or_else(|e| e.into_inner());
        while !plan.stopped && plan.next < paths.len() {
            if !plan.room() {
                // Once those being opened are taken, the guess may change; with none, the
                // next file would likely pass the budget: it is left to the next round.
                if plan.opening == 0 {
                    plan.stopped = true;
                    done_one.notify_all();
                    break;
                }
                plan = done_one.wait(plan).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let i = plan.next;
            plan.next += 1;
            plan.opening += 1;
            drop(plan);
            let opening = Opening {
                state: &state,
                done_one: &done_one,
            };
            let done = one(paths[i]);
            drop(opening);
            plan = state.lock().unwrap_or_else(|e| e.into_inner());
            plan.opening -= 1;
            let fits = plan.left.as_mut().is_none_or(|left| left.take(done.0));
            plan.stopped |= !fits;
            let _ = opened[i].set(done);
            done_one.notify_all();
        }
    };
    let threads = paths
        .len()
        .div_ceil(FILES_PER_THREAD)
        .clamp(1, READ_THREADS);
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(claim);
        }
        claim();
    });
    opened.into_iter().map_while(OnceLock::into_inner).collect()
}

/// A file a `read_ahead` thread is opening: if opening it panics, the file is no longer being
/// opened and the others stop, rather than wait for it forever (the panic then reaches the
/// planner, which plans without reading ahead).
struct Opening<'a> {
    state: &'a Mutex<Ahead>,
    done_one: &'a Condvar,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut plan = self.state.lock().unwrap_or_else(|e| e.into_inner());
            plan.opening -= 1;
            plan.stopped = true;
            self.done_one.notify_all();
        }
    }
}

/// What the threads of a `read_ahead` share: what the files taken leave of the budget, the
/// next file to open, how many are being opened, and whether one did not fit.
struct Ahead {
    left: Option<FileBudget>,
    next: usize,
    opening: usize,
    stopped: bool,
}

impl Ahead {
    /// Whether another file may be opened beside those being opened.
    fn room(&self) -> bool {
        self.left.is_none_or(|left| left.room_for(self.opening + 1))
    }
}

/// Starts reading the first `len` bytes of `file` into the page cache, without waiting for them.
fn will_need(file: &File, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor; the call only advises the kernel.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                0,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Reads a content from its start; returns its bytes.
    fn read_all(source: &mut Source<'_>) -> Result<Vec<u8>> {
        let mut all = Vec::new();
        source.blocks(|block, _| {
            all.extend_from_slice(block);
            Ok(true)
        })?;
        Ok(all)
    }

    #[test]
    fn a_file_that_changes_size_while_it_is_read_is_refused_naming_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.bin");
        let bytes: Vec<u8> = (0..2 * IN_BLOCK + 10).map(|i| i as u8).collect();
        let shrink = |f: &File| f.set_len(IN_BLOCK as u64 + 1);
        let grow = |mut f: &File| f.write_all(b"more");
        for change in [&shrink as &dyn Fn(&File) -> std::io::Result<()>, &grow] {
            std::fs::write(&path, &bytes).unwrap();
            let content = Content::Path(path.clone());
            let mut buf = Vec::new();
            let mut source = content.source(7, "text/plain", &mut buf, None).unwrap();
            // Read whole once: the same bytes each time it is read from the start.
            assert!(read_all(&mut source).unwrap() == bytes);
            let writer = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            change(&writer).unwrap();
            match read_all(&mut source).unwrap_err() {
                Error::Record {
                    index,
                    field,
                    message,
                    kind,
                    ..
                } => {
                    assert_eq!(
                        (index, field, kind),
                        (7, Some("content_path"), RecordErrorKind::Unreadable)
                    );
                    assert!(message.contains("while it was read"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_file_rewritten_in_place_at_its_size_between_two_reads_is_refused() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.bin");
        let bytes: Vec<u8> = (0..2 * IN_BLOCK + 10).map(|i| i as u8).collect();
        // Rewritten, and rewritten with its modification time put back (as `cp -p` or rsync
        // do): only the bytes of the two reads tell the second.
        for keep_mtime in [false, true] {
            std::fs::write(&path, &bytes).unwrap();
            let content = Content::Path(path.clone());
            let mut buf = Vec::new();
            let mut source = content.source(7, "text/plain", &mut buf, None).unwrap();
            assert!(read_all(&mut source).unwrap() == bytes);
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let mtime = file.metadata().unwrap().modified().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
            file.write_all_at(b"new", IN_BLOCK as u64 + 5).unwrap();
            if keep_mtime {
                file.set_modified(mtime).unwrap();
            }
            let err = read_all(&mut source).unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::Record {
                        index: 7,
                        kind: RecordErrorKind::Unreadable,
                        ..
                    }
                ),
                "{err:?}"
            );
            let message = err.to_string();
            assert!(message.contains("changed while it was read"), "{message}");
        }
    }

    #[test]
    fn a_file_rewritten_between_its_opening_ahead_and_its_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"0123456789").unwrap();
        let opened = open_ahead(&path);
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&path, b"9876543210").unwrap();
        let err = read(&path, Some(opened)).unwrap_err().to_string();
        assert!(err.contains("changed while it was read"), "{err}");
    }

    #[test]
    fn running_out_of_descriptors_stops_the_build_and_refuses_no_record() {
        let path = Path::new("/docs/a.pdf");
        for code in [libc::EMFILE, libc::ENFILE] {
            let e = cannot_read(path, std::io::Error::from_raw_os_error(code)).into_error(3);
            match e {
                Error::Io { path: p, source } => {
                    assert_eq!((p.as_path(), source.raw_os_error()), (path, Some(code)));
                }
                other => panic!("{other:?}"),
            }
        }
        let e = cannot_read(path, std::io::Error::from_raw_os_error(libc::EACCES)).into_error(3);
        assert!(matches!(
            e,
            Error::Record {
                kind: RecordErrorKind::Unreadable,
                ..
            }
        ));
    }

    #[test]
    fn text_cut_between_blocks_anywhere_is_put_together() {
        let text = "a\u{e9}\u{65e5}\u{1f600}b".repeat(3);
        for cut in 0..=text.len() {
            for second in cut..=text.len() {
                let bytes = text.as_bytes();
                let parts = [&bytes[..cut], &bytes[cut..second], &bytes[second..]];
                let mut utf8 = Utf8Blocks::default();
                let mut joined = String::new();
                for (i, part) in parts.iter().enumerate() {
                    utf8.push(part, i == 2, |piece| {
                        joined.push_str(piece);
                        Ok(())
                    })
                    .unwrap();
                }
                assert_eq!(joined, text);
            }
        }
        let mut utf8 = Utf8Blocks::default();
        assert!(utf8.push(b"ab\xe6\x97", false, |_| Ok(())).is_ok());
        assert!(
            utf8.push(b"", true, |_| Ok(())).is_err(),
            "a cut character at the end"
        );
        let mut utf8 = Utf8Blocks::default();
        assert!(utf8.push(b"ab\xe6", false, |_| Ok(())).is_ok());
        assert!(
            utf8.push(b"x", true, |_| Ok(())).is_err(),
            "a broken character"
        );
    }

    fn read(path: &Path, opened: Option<OpenedFile>) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        let content = Content::Path(path.to_owned());
        let (bytes, _) = content.resolve(7, "application/octet-stream", &mut buf, opened)?;
        Ok(bytes.to_vec())
    }

    fn open_ahead(path: &Path) -> OpenedFile {
        let (size, opened) = read_ahead(&[path], None).pop().unwrap();
        assert_eq!(size, std::fs::metadata(path).unwrap().len());
        opened.expect("held open")
    }

    #[test]
    fn a_file_opened_ahead_is_read_whole_and_must_not_change_size_before_its_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read(&path, Some(open_ahead(&path))).unwrap(), b"0123456789");

        for (now, how) in [(&b"01234"[..], "shrank"), (b"0123456789 and more", "grew")] {
            let opened = open_ahead(&path);
            std::fs::write(&path, now).unwrap();
            let err = read(&path, Some(opened)).unwrap_err().to_string();
            assert!(
                err.contains("record 7") && err.contains("content_path"),
                "{err}"
            );
            assert!(err.contains(&format!("{} {how} while it was read", path.display())));
            std::fs::write(&path, b"0123456789").unwrap();
        }

        // A file that vanished once opened is read from the descriptor held; one that vanished
        // before is refused by name.
        let opened = open_ahead(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(read(&path, Some(opened)).unwrap(), b"0123456789");
        let err = read(&path, None).unwrap_err().to_string();
        assert!(
            err.contains(&format!("cannot read {}", path.display())),
            "{err}"
        );
    }

    #[test]
    fn a_file_empty_when_opened_must_still_be_empty_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read(&path, Some(open_ahead(&path))).unwrap(), b"");
        // Truncated, planned as empty, and written again before its read.
        let opened = open_ahead(&path);
        std::fs::write(&path, b"the new version").unwrap();
        let err = read(&path, Some(opened)).unwrap_err().to_string();
        assert!(
            err.contains("record 7") && err.contains("changed while it was read"),
            "{err}"
        );
        // Refused before a byte of it is read: the read would go on to the ceiling (~1 GB).
        std::fs::write(&path, b"").unwrap();
        let opened = open_ahead(&path);
        std::fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
        let mut buf = Vec::new();
        let content = Content::Path(path.clone());
        let err = (content.resolve(7, "text/plain", &mut buf, Some(opened)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed while it was read"), "{err}");
        assert!(buf.is_empty(), "{} bytes read first", buf.len());
        // A file of /proc says 0 bytes and holds more: read whole, as it does not change.
        let status = read(Path::new("/proc/self/status"), None).unwrap();
        assert!(status.starts_with(b"Name:"), "{status:?}");
    }

    #[test]
    fn a_fingerprint_read_from_the_encodings_opening_is_refused_if_the_file_changed_since() {
        use crate::fingerprint::fingerprint_opened;
        use crate::record::Record;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"first").unwrap();
        let record = Record {
            url: "http://docs.example.com/a".into(),
            content: Some(Content::Path(path.clone())),
            ..Default::default()
        };
        let opened = open_ahead(&path);
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&path, b"other").unwrap();
        // The encoding would refuse it; so does its fingerprint, read from the same opening.
        let err = fingerprint_opened(5, &record, opened.try_clone()).unwrap_err();
        assert!(
            err.to_string().contains("changed while it was read"),
            "{err}"
        );
        assert!(read(&path, Some(opened)).is_err());
    }

    #[test]
    fn a_file_opened_for_another_path_is_not_read_for_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mine, other) = (dir.path().join("mine"), dir.path().join("other"));
        std::fs::write(&mine, b"mine").unwrap();
        std::fs::write(&other, b"other").unwrap();
        assert_eq!(read(&mine, Some(open_ahead(&other))).unwrap(), b"mine");
    }

    #[test]
    fn reading_ahead_stops_at_the_first_file_it_is_told_to() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files_of_growing_sizes(dir.path(), 10);
        let borrowed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        // Sizes 1, 2, 3 growing past the guess (the mean of those taken): the third passes 5
        // bytes; it is opened, and none after it.
        let planned = read_ahead(&borrowed, Some(held_budget(5)));
        let sizes: Vec<u64> = planned.iter().map(|(size, _)| *size).collect();
        assert_eq!(sizes, [1, 2, 3]);
    }

    /// `count` files in `dir`, of 1, 2, 3... bytes.
    fn files_of_growing_sizes(dir: &Path, count: usize) -> Vec<PathBuf> {
        (0..count)
            .map(|n| {
                let path = dir.join(n.to_string());
                std::fs::write(&path, vec![b'x'; n + 1]).unwrap();
                path
            })
            .collect()
    }

    /// A budget of `held` bytes of small files, and nothing else.
    fn held_budget(held: u64) -> FileBudget {
        FileBudget {
            big: u64::MAX,
            bytes: 0,
            files: 0,
            held,
            named: usize::MAX,
            taken: (0, 0),
        }
    }

    #[test]
    fn reading_ahead_on_many_threads_opens_no_file_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        // Enough files for every thread: each opened file of 10 bytes is returned.
        let paths: Vec<PathBuf> = (0..READ_THREADS * FILES_PER_THREAD)
            .map(|n| {
                let path = dir.path().join(n.to_string());
                std::fs::write(&path, [b'x'; 10]).unwrap();
                path
            })
            .collect();
        let borrowed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        for _ in 0..20 {
            let planned = read_ahead(&borrowed, Some(held_budget(100)));
            assert_eq!(planned.len(), 10);
        }
    }

    #[test]
    fn files_held_open_take_a_quarter_of_the_descriptors_free() {
        assert_eq!(held_within(1024, 24), 250);
        // A caller holding all but 24: 6, not a quarter of the limit.
        assert_eq!(held_within(1024, 1000), 6);
        assert_eq!(held_within(1024, 2000), 0);
        assert_eq!(held_within(1 << 20, 10), 4096);
        // None listed: none free.
        assert_eq!(held_within(1024, usize::MAX), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn descriptors_that_cannot_be_listed_leave_a_quarter_of_the_limit_unless_none_are_free() {
        let failed = |errno| others_listed(Err(std::io::Error::from_raw_os_error(errno)), 0);
        // No /proc: as if none were open.
        assert_eq!(held_within(1024, failed(libc::ENOENT)), 256);
        assert_eq!(held_within(1024, failed(libc::EACCES)), 256);
        // No descriptor free to list them with: none free.
        assert_eq!(held_within(1024, failed(libc::EMFILE)), 0);
        assert_eq!(held_within(1024, failed(libc::ENFILE)), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn descriptors_are_recounted_after_twenty_times_the_listing_or_10_ms() {
        use std::time::Duration;
        assert_eq!(recount_after(Duration::from_micros(11)), RECOUNT);
        assert_eq!(
            recount_after(Duration::from_millis(15)),
            Duration::from_millis(300)
        );
    }

    #[test]
    fn with_few_descriptors_free_files_past_the_bound_are_sized_by_name_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files_of_growing_sizes(dir.path(), 40);
        let borrowed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let count: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let planned = read_ahead_counted(&borrowed, None, count, 3);
        let sizes: Vec<u64> = planned.iter().map(|(size, _)| *size).collect();
        assert_eq!(sizes, (1..=40).collect::<Vec<u64>>());
        assert_eq!(planned.iter().filter(|(_, f)| f.is_some()).count(), 3);
    }

    #[test]
    fn files_held_open_are_bounded_and_closed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let most = 20;
        let paths: Vec<PathBuf> = (0..most + 10)
            .map(|n| {
                let path = dir.path().join(n.to_string());
                std::fs::write(&path, b"x").unwrap();
                path
            })
            .collect();
        let borrowed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let count: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let planned = read_ahead_counted(&borrowed, None, count, most);
        // Every size is known; exactly the bound is held, and the rest closed.
        assert!(planned.iter().all(|(size, _)| *size == 1));
        let held = planned.iter().filter(|(_, f)| f.is_some()).count();
        assert_eq!(held, most);
        assert_eq!(count.load(Ordering::Relaxed), most);
        // A second descriptor of an opening counts too; dropped, they make room.
        let another = planned[0].1.as_ref().unwrap().try_clone().unwrap();
        assert_eq!(count.load(Ordering::Relaxed), most + 1);
        drop(planned);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(another);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
