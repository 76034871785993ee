//! A record's content: the forms a user gives it in, and the bytes each form stands for.

use std::borrow::Cow;
use std::io::Read;
use std::path::PathBuf;

use crate::encode::decode_base64_into;
use crate::error::{Error, RecordErrorKind, Result};
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
    /// decoded base64, a file's bytes or text made UTF-8.
    pub(crate) fn resolve<'s>(
        &'s self,
        index: usize,
        mimetype: &str,
        buf: &'s mut Vec<u8>,
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
                read_content_file(p, buf).map_err(|m| {
                    Error::refused(RecordErrorKind::Unreadable, index, Some(field), m)
                })?;
                // A file is text when its type says so and its bytes are UTF-8.
                let text = is_textual(mimetype)
                    .then(|| std::str::from_utf8(buf).ok())
                    .flatten();
                (buf, text)
            }
        })
    }
}

/// Reads a `content_path` file into `buf`: only a regular file (a FIFO would block the build,
/// a device never end), and no more than the hard ceiling on a feed file, which no content
/// larger can fit under (a file that grows while read stops there too).
fn read_content_file(path: &std::path::Path, buf: &mut Vec<u8>) -> std::result::Result<(), String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file = open_content_file(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file (a FIFO, socket or device)",
            path.display()
        ));
    }
    let limit = crate::limits::HARD_MAX_BYTES;
    if meta.len() > limit {
        return Err(format!(
            "{} is {} bytes, more than a feed file can hold ({limit}): feed its URL in a web \
             feed instead",
            path.display(),
            meta.len()
        ));
    }
    buf.clear();
    buf.reserve(meta.len() as usize);
    file.take(limit + 1).read_to_end(buf).map_err(cannot)?;
    if buf.len() as u64 > limit {
        return Err(format!(
            "{} grew past {limit} bytes while it was read",
            path.display()
        ));
    }
    Ok(())
}

/// Opens a `content_path` file for reading. Opening a FIFO for reading waits for a writer:
/// O_NONBLOCK returns at once, and fstat then tells what it is. It changes nothing for a
/// regular file's reads.
fn open_content_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
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

/// Asks the kernel to read the start of each file ahead, many at a time, and returns each
/// file's size (0 for what cannot be opened or is not a regular file: its read will say why).
/// Its threads may wait for the disk.
pub(crate) fn read_ahead(paths: &[&std::path::Path]) -> Vec<u64> {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    let budget = AtomicU64::new(READ_AHEAD_CHUNK);
    let next = AtomicUsize::new(0);
    let sizes: Vec<AtomicU64> = paths.iter().map(|_| AtomicU64::new(0)).collect();
    let one = |path: &std::path::Path| {
        let Ok(file) = open_content_file(path) else {
            return 0;
        };
        let size = file
            .metadata()
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map_or(0, |m| m.len());
        let len = size.min(READ_AHEAD_FILE);
        let granted = budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(len)
            })
            .is_ok();
        if granted && len > 0 {
            will_need(&file, len);
        }
        size
    };
    // Each thread takes the next file not taken yet.
    let claim = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(path) = paths.get(i) else { break };
        sizes[i].store(one(path), Ordering::Relaxed);
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
    sizes.into_iter().map(AtomicU64::into_inner).collect()
}

/// Starts reading the first `len` bytes of `file` into the page cache, without waiting for them.
fn will_need(file: &std::fs::File, len: u64) {
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
