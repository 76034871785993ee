//! A record's content: the forms a user gives it in, and the bytes each form stands for.

use std::borrow::Cow;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

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
                let planned = opened.filter(|o| o.path == *p);
                match &planned {
                    Some(o) => read_content_file(p, &o.file, o.size, buf),
                    None => open_content_file(p)
                        .and_then(|(file, size)| read_content_file(p, &file, size, buf)),
                }
                .map_err(|m| Error::refused(RecordErrorKind::Unreadable, index, Some(field), m))?;
                // A file is text when its type says so and its bytes are UTF-8.
                let text = is_textual(mimetype)
                    .then(|| std::str::from_utf8(buf).ok())
                    .flatten();
                (buf, text)
            }
        })
    }
}

/// Opens a `content_path` file and takes its size: only a regular file (a FIFO would block
/// the build, a device never end), and no larger than the hard ceiling on a feed file, which no
/// content larger can fit under.
fn open_content_file(path: &Path) -> std::result::Result<(File, u64), String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
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
    Ok((file, meta.len()))
}

/// Reads all of `file` into `buf`: `size` bytes, its size when it was opened. A file that
/// changed size since (truncated, rewritten, appended to) is refused: what was read is not
/// the document, and a short read would send a shorter one.
fn read_content_file(
    path: &Path,
    file: &File,
    size: u64,
    buf: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    buf.clear();
    buf.reserve_exact(size as usize);
    file.take(size + 1)
        .read_to_end(buf)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if buf.len() as u64 != size {
        let how = if (buf.len() as u64) < size {
            "shrank"
        } else {
            "grew"
        };
        return Err(format!(
            "{} {how} while it was read ({size} bytes when opened): build again once it is \
             complete",
            path.display()
        ));
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
    size: u64,
}

impl Drop for OpenedFile {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Files held open between their planning and their read, across all builds of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The most files held open so: a quarter of the process's limit on descriptors (RLIMIT_NOFILE,
/// often 1,024), so that the user's own files and sockets always have room. A file planned past
/// it is closed once asked ahead, and opened again by its encoding thread.
fn max_held() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        #[cfg(unix)]
        {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit only fills the struct it is given.
            if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
                return (limit.rlim_cur / 4).min(4096) as usize;
            }
        }
        256
    })
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
/// Its threads may wait for the disk.
pub(crate) fn read_ahead(paths: &[&Path]) -> Vec<(u64, Option<OpenedFile>)> {
    let budget = AtomicU64::new(READ_AHEAD_CHUNK);
    let next = AtomicUsize::new(0);
    let opened: Vec<OnceLock<(u64, Option<OpenedFile>)>> =
        paths.iter().map(|_| OnceLock::new()).collect();
    let one = |path: &Path| {
        let Ok((file, size)) = open_content_file(path) else {
            return (0, None);
        };
        let len = size.min(READ_AHEAD_FILE);
        let granted = budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(len)
            })
            .is_ok();
        if granted && len > 0 {
            will_need(&file, len);
        }
        let held = HELD
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max_held()).then_some(n + 1)
            })
            .is_ok();
        let file = held.then(|| OpenedFile {
            path: path.to_owned(),
            file,
            size,
        });
        (size, file)
    };
    // Each thread takes the next file not taken yet.
    let claim = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(path) = paths.get(i) else { break };
        let _ = opened[i].set(one(path));
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
    opened
        .into_iter()
        .map(|o| o.into_inner().unwrap_or((0, None)))
        .collect()
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

    fn read(path: &Path, opened: Option<OpenedFile>) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        let content = Content::Path(path.to_owned());
        let (bytes, _) = content.resolve(7, "application/octet-stream", &mut buf, opened)?;
        Ok(bytes.to_vec())
    }

    fn open_ahead(path: &Path) -> OpenedFile {
        let (size, opened) = read_ahead(&[path]).pop().unwrap();
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
    fn a_file_opened_for_another_path_is_not_read_for_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mine, other) = (dir.path().join("mine"), dir.path().join("other"));
        std::fs::write(&mine, b"mine").unwrap();
        std::fs::write(&other, b"other").unwrap();
        assert_eq!(read(&mine, Some(open_ahead(&other))).unwrap(), b"mine");
    }

    #[test]
    fn files_held_open_are_bounded_and_closed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..max_held() + 10)
            .map(|n| {
                let path = dir.path().join(n.to_string());
                std::fs::write(&path, b"x").unwrap();
                path
            })
            .collect();
        let borrowed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let planned = read_ahead(&borrowed);
        // Every size is known; no more than the bound is held (other tests may hold some).
        assert!(planned.iter().all(|(size, _)| *size == 1));
        let held = planned.iter().filter(|(_, f)| f.is_some()).count();
        assert!(held <= max_held() && held >= max_held() - 16, "{held}");
        assert!(HELD.load(Ordering::Relaxed) <= max_held());
        // Dropped, they are closed and make room (other tests hold one each at most).
        drop(planned);
        assert!(HELD.load(Ordering::Relaxed) < 3);
    }
}
