//! A directory of documents walked into records, on a thread of its own: `readdir` and `stat`
//! of every file with no interpreter lock held, the records made as JSON Lines, handed over in
//! batches bounded in items (files and refusals) and in bytes (files' sizes, refused paths). In
//! Python, on one thread under the GIL, the walk of a tree of small files took as long as
//! encoding them on one core, and left the second core waiting for it.
//!
//! The order, the records and the refusals are those `os.walk` gave: directories top-down,
//! each one's files in name order (Python's, code points with undecodable bytes as surrogates),
//! then its subdirectories in the same order; a symbolic link to a file is the file, a link to
//! a directory is not entered; what cannot be read is a refusal, never left out in silence.

use std::cmp::Ordering;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering as Atomic};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Why an item of the walk is no record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A directory that cannot be listed, with the error's number.
    Directory(i32),
    /// A file that cannot be `stat`ed (a dangling link), with the error's number.
    File(i32),
    /// A path that is not UTF-8: the record schema has no room for it.
    Name,
    /// A FIFO, socket or device.
    NotRegular,
}

/// Records of a directory's files, as JSON Lines, and what was refused, in walk order.
#[derive(Default, Debug)]
pub struct Batch {
    /// One record a line: `url`, `content_path`, `last_modified`.
    pub lines: Vec<u8>,
    /// Each line's file.
    pub paths: Vec<String>,
    /// The items refused, with their paths (undecodable bytes shown as `\xNN`).
    pub refused: Vec<(String, Refusal)>,
}

impl Batch {
    fn len(&self) -> usize {
        self.paths.len() + self.refused.len()
    }
}

/// What a walk is asked to do.
pub struct WalkOptions {
    /// The URL the top directory maps to (a slash is added if it has none).
    pub base_url: String,
    /// A directory not to enter, by device and inode: the output, when it lies in the input.
    pub skip: Option<(u64, u64)>,
    /// A batch ends at this many items, or once its files (and refused paths) hold
    /// `batch_bytes`.
    pub batch_items: usize,
    pub batch_bytes: u64,
}

/// A walk running ahead on its thread; `next` takes its batches in order.
pub struct Walk {
    /// In a mutex only to make the walk `Sync`, as Python objects must be.
    batches: Option<Mutex<Receiver<Batch>>>,
    thread: Option<JoinHandle<()>>,
    /// Set when the batches are no longer wanted: the thread stops at its next directory or
    /// item, not only at its next hand-over (empty or refused stretches of a tree hand
    /// nothing over, and the caller waits for the thread holding the GIL).
    stopping: Arc<AtomicBool>,
}

/// The walk's thread ended without finishing the walk (it panicked): what it handed over is
/// not the whole tree.
#[derive(Debug)]
pub struct WalkFailed;

/// Batches made ahead of the one taken: they are small (a record is about 200 bytes), and
/// enough to ride out a directory whose inodes come from the disk.
const AHEAD: usize = 4;

impl Walk {
    /// Starts walking `top` (a path as Python gave it: `.` maps its files' paths relative to
    /// it, as `a/b`, any other path prefixes them).
    pub fn start(top: OsString, options: WalkOptions) -> io::Result<Walk> {
        let (tx, rx) = sync_channel(AHEAD);
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let thread = std::thread::Builder::new()
            .name("fastfeed-walk".into())
            .spawn(move || {
                let mut send = |batch: Option<Batch>| match batch {
                    Some(batch) => tx.send(batch).is_ok(),
                    None => !stop.load(Atomic::Relaxed),
                };
                let mut walker = Walker {
                    base: if options.base_url.ends_with('/') {
                        options.base_url.clone()
                    } else {
                        format!("{}/", options.base_url)
                    },
                    relative: top.as_bytes() == b".",
                    options,
                    batch: Batch::default(),
                    bytes: 0,
                    send: &mut send,
                };
                if walker.walk(&top, b"") {
                    let last = std::mem::take(&mut walker.batch);
                    if last.len() > 0 {
                        (walker.send)(Some(last));
                    }
                }
            })?;
        Ok(Walk {
            batches: Some(Mutex::new(rx)),
            thread: Some(thread),
            stopping,
        })
    }

    /// The next batch, waiting for it; None once the walk is done, an error if its thread
    /// died before the end (a full feed of part of a tree would delete the rest).
    pub fn next_batch(&mut self) -> Result<Option<Batch>, WalkFailed> {
        let Some(batches) = self.batches.as_mut() else {
            return Ok(None);
        };
        let batch = batches
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .recv()
            .ok();
        if batch.is_none() && self.stop().is_err() {
            return Err(WalkFailed);
        }
        Ok(batch)
    }

    fn stop(&mut self) -> std::thread::Result<()> {
        self.stopping.store(true, Atomic::Relaxed);
        self.batches = None;
        match self.thread.take() {
            Some(thread) => thread.join(),
            None => Ok(()),
        }
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

struct Walker<'a> {
    base: String,
    relative: bool,
    options: WalkOptions,
    batch: Batch,
    bytes: u64,
    /// Hands a full batch over (`Some`), or only asks whether to go on (`None`); false once no
    /// one takes batches any more.
    send: &'a mut dyn FnMut(Option<Batch>) -> bool,
}

impl Walker<'_> {
    /// Walks the directory `dir`, which is `inside` the top (empty for the top); false once
    /// the walk is to stop.
    fn walk(&mut self, dir: &OsStr, inside: &[u8]) -> bool {
        if !(self.send)(None) {
            return false;
        }
        let (files, dirs) = match list(dir) {
            Ok(listed) => listed,
            Err(err) => return self.refuse(dir, Refusal::Directory(errno(&err))),
        };
        let here: &[u8] = if self.relative {
            inside
        } else {
            dir.as_bytes()
        };
        let url_dir = if inside.is_empty() {
            self.base.clone()
        } else {
            let mut url = self.base.clone();
            quote_into(inside, &mut url);
            url.push('/');
            url
        };
        for name in files {
            let path = join(here, name.as_bytes());
            let go_on = match self.record(&url_dir, &name, &path) {
                Ok(size) => {
                    self.bytes += size;
                    self.full()
                }
                Err(why) => self.refuse(OsStr::from_bytes(&path), why),
            };
            if !go_on {
                return false;
            }
        }
        // Not entered: a link to a directory (as `os.walk` without `followlinks`), and the
        // output directory.
        for (name, _) in dirs.iter().filter(|(_, link)| !link) {
            let path = join(dir.as_bytes(), name.as_bytes());
            let path = OsStr::from_bytes(&path);
            if self.options.skip.is_some()
                && fs::metadata(path).ok().map(|s| (s.dev(), s.ino())) == self.options.skip
            {
                continue;
            }
            let inner = join(inside, name.as_bytes());
            if !self.walk(path, &inner) {
                return false;
            }
        }
        true
    }

    /// Adds the record of the file `name` at `path`, in the directory whose URL is `url_dir`;
    /// returns the file's size, or why it is no record.
    fn record(&mut self, url_dir: &str, name: &OsStr, path: &[u8]) -> Result<u64, Refusal> {
        #[cfg(test)]
        if name.as_bytes() == tests::PANIC_HERE {
            panic!("a panic the test asked for");
        }
        let text = std::str::from_utf8(path).map_err(|_| Refusal::Name)?;
        let status = fs::metadata(text).map_err(|err| Refusal::File(errno(&err)))?;
        if !status.is_file() {
            // A FIFO would block the build forever, a device never end.
            return Err(Refusal::NotRegular);
        }
        let mut url = url_dir.to_owned();
        quote_into(name.as_bytes(), &mut url);
        record_line(&url, text, last_modified(&status), &mut self.batch.lines);
        self.batch.paths.push(text.to_owned());
        Ok(status.len())
    }

    /// Sets an item aside with why it is no record; false once the walk is to stop. A refusal
    /// fills the batch as a record does, by its path's bytes: a directory of a million
    /// unreadable entries would otherwise be one batch, held whole.
    fn refuse(&mut self, path: &OsStr, why: Refusal) -> bool {
        let path = shown(path.as_bytes());
        self.bytes += path.len() as u64;
        self.batch.refused.push((path, why));
        self.full()
    }

    /// Hands the batch over if it is full; false once the walk is to stop.
    fn full(&mut self) -> bool {
        if self.batch.len() < self.options.batch_items && self.bytes < self.options.batch_bytes {
            return (self.send)(None);
        }
        self.bytes = 0;
        (self.send)(Some(std::mem::take(&mut self.batch)))
    }
}

/// A directory's files and subdirectories, each in Python's name order. A link to a directory
/// counts as a subdirectory (it is then not entered), a link to anything else as a file.
/// Subdirectories come with whether they are links.
type Listing = (Vec<OsString>, Vec<(OsString, bool)>);

fn list(dir: &OsStr) -> io::Result<Listing> {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let (is_dir, link) = match entry.file_type() {
            Ok(kind) if kind.is_symlink() => {
                (fs::metadata(entry.path()).is_ok_and(|s| s.is_dir()), true)
            }
            Ok(kind) => (kind.is_dir(), false),
            Err(_) => (false, false),
        };
        if is_dir {
            dirs.push((entry.file_name(), link));
        } else {
            files.push(entry.file_name());
        }
    }
    files.sort_by(|a, b| python_order(a.as_bytes(), b.as_bytes()));
    dirs.sort_by(|a, b| python_order(a.0.as_bytes(), b.0.as_bytes()));
    Ok((files, dirs))
}

fn errno(err: &io::Error) -> i32 {
    err.raw_os_error().unwrap_or(libc::EIO)
}

/// `os.path.join(parent, name)`, where `parent` empty is the current directory.
fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(parent.len() + 1 + name.len());
    path.extend_from_slice(parent);
    if !parent.is_empty() && !parent.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// How Python orders file names: by code point, a byte that is no UTF-8 taken as the surrogate
/// U+DC80 to U+DCFF (`surrogateescape`). Byte order, where both names are UTF-8.
fn python_order(a: &[u8], b: &[u8]) -> Ordering {
    if let (Ok(_), Ok(_)) = (std::str::from_utf8(a), std::str::from_utf8(b)) {
        return a.cmp(b);
    }
    code_points(a).cmp(code_points(b))
}

fn code_points(name: &[u8]) -> impl Iterator<Item = u32> + '_ {
    name.utf8_chunks().flat_map(|chunk| {
        let valid = chunk.valid().chars().map(u32::from);
        let invalid = chunk.invalid().iter().map(|&b| 0xDC00 + u32::from(b));
        valid.chain(invalid)
    })
}

/// A path as text: bytes that are no UTF-8 as `\xNN` (Python's `backslashreplace`).
fn shown(path: &[u8]) -> String {
    let mut text = String::with_capacity(path.len());
    for chunk in path.utf8_chunks() {
        text.push_str(chunk.valid());
        for b in chunk.invalid() {
            text.push_str(&format!("\\x{b:02x}"));
        }
    }
    text
}

/// Appends `bytes` percent-encoded as `urllib.parse.quote(..., safe="/")` does.
fn quote_into(bytes: &[u8], url: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"_.-~/".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push('%');
            url.push(char::from(HEX[usize::from(b >> 4)]));
            url.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

/// `int(os.stat(path).st_mtime)`: seconds and nanoseconds summed as a double, then truncated,
/// as Python does.
fn last_modified(status: &fs::Metadata) -> i64 {
    (status.mtime() as f64 + status.mtime_nsec() as f64 * 1e-9) as i64
}

fn record_line(url: &str, path: &str, modified: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"url\":");
    json_string(url, out);
    out.extend_from_slice(b",\"content_path\":");
    json_string(path, out);
    out.extend_from_slice(format!(",\"last_modified\":{modified}}}\n").as_bytes());
}

fn json_string(text: &str, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_as_python_quotes_them() {
        let mut url = String::new();
        quote_into("d 1/50%/a#b é~_.-.txt".as_bytes(), &mut url);
        assert_eq!(url, "d%201/50%25/a%23b%20%C3%A9~_.-.txt");
    }

    #[test]
    fn names_are_ordered_as_python_orders_them() {
        // "é" (U+00E9) comes before a lone byte 0x80 (U+DC80) in Python, after it in bytes.
        assert_eq!(python_order("é".as_bytes(), b"\x80"), Ordering::Less);
        assert_eq!(python_order(b"B", b"a"), Ordering::Less);
        assert_eq!(shown(b"caf\xe9.txt"), "caf\\xe9.txt");
    }

    #[test]
    fn the_top_gives_the_form_of_every_path() {
        assert_eq!(join(b"", b"a"), b"a");
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"tree/sub", b"a"), b"tree/sub/a");
    }

    fn options(batch_items: usize, batch_bytes: u64) -> WalkOptions {
        WalkOptions {
            base_url: "http://h/".into(),
            skip: None,
            batch_items,
            batch_bytes,
        }
    }

    /// The sizes of the batches of a walk of `top`.
    fn batch_sizes(top: &std::path::Path, batch_items: usize, batch_bytes: u64) -> Vec<usize> {
        let top = top.as_os_str().to_owned();
        let mut walk = Walk::start(top, options(batch_items, batch_bytes)).unwrap();
        let mut sizes = Vec::new();
        while let Some(batch) = walk.next_batch().expect("the walk ends") {
            sizes.push(batch.len());
        }
        sizes
    }

    #[test]
    fn refused_items_fill_batches_as_records_do() {
        // Else a directory of a million dangling links would be one batch, held whole.
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::os::unix::fs::symlink("missing", dir.path().join(format!("{i}"))).unwrap();
        }
        assert_eq!(batch_sizes(dir.path(), 3, 1 << 20), [3, 3, 3, 1]);
        // A refusal's bytes are its path's.
        assert_eq!(batch_sizes(dir.path(), 1000, 1), [1; 10]);
    }

    #[test]
    fn a_walk_gives_files_then_subdirectories_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("top");
        fs::create_dir_all(top.join("b")).unwrap();
        fs::create_dir_all(top.join("a")).unwrap();
        for name in ["b/2", "a/1", "z", "y"] {
            fs::write(top.join(name), "x").unwrap();
        }
        let mut walk = Walk::start(top.clone().into_os_string(), options(3, 1 << 20)).unwrap();
        let mut paths = Vec::new();
        let mut sizes = Vec::new();
        while let Some(batch) = walk.next_batch().expect("the walk ends") {
            sizes.push(batch.len());
            paths.extend(batch.paths);
        }
        let t = top.to_str().unwrap();
        let want: Vec<String> = ["y", "z", "a/1", "b/2"]
            .iter()
            .map(|p| format!("{t}/{p}"))
            .collect();
        assert_eq!((paths, sizes), (want, vec![3, 1]));
    }

    #[test]
    fn a_walk_dropped_early_stops_at_its_next_directory() {
        // A file, then 100,000 empty directories: a stretch that hands nothing over, which the
        // walk went through to its end before it saw that no one wanted its batches. In memory
        // where it can be: on a busy disk they took a minute to make and remove.
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        fs::write(dir.path().join("a"), "x").unwrap();
        for i in 0..100_000 {
            fs::create_dir(dir.path().join(i.to_string())).unwrap();
        }
        let mut walk = Walk::start(dir.path().as_os_str().to_owned(), options(1, 1 << 20)).unwrap();
        assert!(walk.next_batch().unwrap().is_some());
        let dropped = std::time::Instant::now();
        drop(walk);
        // 2 to 5 ms; 390 ms when the walk went on to the end of the stretch.
        let waited = dropped.elapsed();
        assert!(waited < std::time::Duration::from_millis(100), "{waited:?}");
    }

    /// A file whose name makes the walk's thread panic as it comes to it.
    pub(super) const PANIC_HERE: &[u8] = b"fastfeed-test-panic";

    #[test]
    fn a_walk_whose_thread_panics_fails_instead_of_ending() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), "x").unwrap();
        fs::write(dir.path().join(OsStr::from_bytes(PANIC_HERE)), "x").unwrap();
        let top = dir.path().as_os_str().to_owned();
        let (end, ended) = std::sync::mpsc::channel();
        // On a thread of its own, so that a walk waiting forever fails the test too.
        std::thread::spawn(move || {
            let mut walk = Walk::start(top, options(1, 1 << 20)).unwrap();
            let mut batches = 0;
            let last = loop {
                match walk.next_batch() {
                    Ok(Some(_)) => batches += 1,
                    last => break last.map(|_| ()),
                }
            };
            let _ = end.send((batches, last.is_err()));
        });
        let ended = ended.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(
            ended,
            Ok((1, true)),
            "the file before the panic, then an error"
        );
    }
}
