//! Records too big to hold in memory until the writing thread takes them: moved, as they are
//! encoded, into one unnamed file per encoding thread in the output directory (on the disk the
//! feeds go to, not in a `/tmp` that may be memory), which the writing thread copies into the
//! feed file in their turn. A spilled record is a range of its thread's file and knows its
//! length, which decides the feed file it goes into.
//!
//! One file per thread, not per record: records waiting for the writer are many (a few chunks
//! of them), and a descriptor each ran the process out of descriptors. Each record's range is
//! given back to the file system once copied (a hole punched), and the whole file once none of
//! its records waits.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A record's bytes held in memory before they are moved to a file: a few of these per encoding
/// thread is what a build's records take, whatever the size of their contents.
pub(crate) const SPILL_AT: usize = 4 << 20;
/// A file's size from which its record leaves memory whatever it encodes to (its base64 alone
/// would fill `SPILL_AT`): the plan of a round counts such files against the disk its records
/// take, not the memory (see `CHUNK_FILES`), so one that deflates well must not stay.
pub(crate) const BIG_FILE: u64 = (SPILL_AT / 4 * 3) as u64;
/// Bytes read from a spill file at a time when it is copied.
const COPY_BLOCK: usize = 1 << 20;
/// A thread's spill file is replaced by a new one past this offset while records in it still
/// wait (its holes take no room, but its size is bounded by the file system).
const MAX_OFFSET: u64 = 1 << 40;

/// An encoding thread's spilling.
#[derive(Default)]
pub struct Spill {
    /// Where spill files go; none for an encoder whose records are not written to feed files
    /// by a writer (they then stay in memory, whatever their size).
    dir: Option<Arc<Path>>,
    /// The thread's file, shared with the records in it, and where the next record starts.
    file: Option<(Arc<File>, u64)>,
    /// The record last encoded, when it was moved out.
    done: Option<Spilled>,
}

impl Spill {
    /// Spilling into `dir`.
    pub(crate) fn into_dir(dir: Arc<Path>) -> Self {
        Spill {
            dir: Some(dir),
            file: None,
            done: None,
        }
    }

    /// The record just encoded, if it was moved out: its encoder must take it at once.
    pub(crate) fn take(&mut self) -> Option<Spilled> {
        self.done.take()
    }

    /// The size of the record just encoded, if it was moved out.
    pub(crate) fn done_len(&self) -> Option<u64> {
        self.done.as_ref().map(Spilled::len)
    }

    /// The file a new record is moved into, and where it starts there. A file none of whose
    /// records waits any more is emptied and used from its start again.
    fn start_record(&mut self) -> Result<(Arc<File>, u64)> {
        if let Some((file, end)) = &mut self.file {
            if Arc::strong_count(file) == 1 {
                if *end > 0 {
                    file.set_len(0).map_err(|e| spill_error(&self.dir, e))?;
                    *end = 0;
                }
            } else if *end > MAX_OFFSET {
                self.file = None;
            }
        }
        if self.file.is_none() {
            let dir = self.dir.as_deref().expect("a thread that spills");
            let file = tempfile::tempfile_in(dir).map_err(|e| Error::io(dir, e))?;
            self.file = Some((Arc::new(file), 0));
        }
        let (file, end) = self.file.as_ref().expect("just made");
        Ok((Arc::clone(file), *end))
    }
}

/// A record moved out of memory: `len` bytes at `at` in its thread's file. Its range is given
/// back to the file system when it is dropped (copied, or its chunk failed).
pub(crate) struct Spilled {
    file: Arc<File>,
    at: u64,
    len: u64,
}

impl Spilled {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Hands the record's bytes to `write` in order, a block at a time.
    pub(crate) fn copy_into(
        &self,
        mut write: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut block = vec![0; COPY_BLOCK.min(self.len as usize)];
        let mut done = 0;
        while done < self.len {
            let n = block.len().min((self.len - done) as usize);
            self.file.read_exact_at(&mut block[..n], self.at + done)?;
            write(&block[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

impl Drop for Spilled {
    fn drop(&mut self) {
        punch_hole(&self.file, self.at, self.len);
    }
}

/// Gives the disk blocks of a range of `file` back (they read as zeros after). Where the file
/// system cannot, they come back when the file is emptied or closed.
fn punch_hole(file: &File, at: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor; the call only frees the range's blocks.
        unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                at as libc::off_t,
                len as libc::off_t,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, at, len);
}

/// Where a record's bytes go as it is encoded: `out`, after the records before it, and past
/// `SPILL_AT` bytes its thread's spill file, if the thread spills. Dropped before `finish` (the
/// record failed), it drops what it spilled.
pub(crate) struct Sink<'a> {
    pub(crate) out: &'a mut Vec<u8>,
    /// Where the record starts in `out`.
    start: usize,
    spill: &'a mut Spill,
    /// The record's range in the spill file, once it was moved there: its file, start and
    /// bytes so far. Always the file's last range.
    moved: Option<Spilled>,
}

/// What a piece's buffer keeps past its records after one of them was moved out: the pages its
/// big record touched are given back, so that a piece waiting for the writer holds what its
/// records hold, not a big record's worth.
const SLACK: usize = 64 << 10;

impl<'a> Sink<'a> {
    /// The sink of the record that starts at `start` in `out`.
    pub(crate) fn new(out: &'a mut Vec<u8>, start: usize, spill: &'a mut Spill) -> Self {
        debug_assert!(spill.done.is_none(), "a record moved out was not taken");
        Sink {
            out,
            start,
            spill,
            moved: None,
        }
    }

    /// The record's length so far.
    pub(crate) fn len(&self) -> u64 {
        self.moved() + (self.out.len() - self.start) as u64
    }

    fn moved(&self) -> u64 {
        self.moved.as_ref().map_or(0, |m| m.len)
    }

    /// Takes the record back to its first `len` bytes (an encoding that did not pay).
    pub(crate) fn truncate(&mut self, len: u64) -> Result<()> {
        let moved = self.moved();
        if len >= moved {
            self.out.truncate(self.start + (len - moved) as usize);
            return Ok(());
        }
        let m = self.moved.as_mut().expect("bytes were moved");
        // The record is its file's last range: nothing after it is cut.
        m.file
            .set_len(m.at + len)
            .map_err(|e| spill_error(&self.spill.dir, e))?;
        m.len = len;
        self.out.truncate(self.start);
        Ok(())
    }

    /// Moves the record out of memory (to its end, as it is written) if the thread spills,
    /// however short: the record of a `BIG_FILE`.
    pub(crate) fn move_out_whole(&mut self) -> Result<()> {
        if self.spill.dir.is_some() {
            self.move_out()?;
        }
        Ok(())
    }

    /// Moves the record's bytes out of memory when they are many and the thread spills.
    pub(crate) fn relieve(&mut self) -> Result<()> {
        if self.out.len() - self.start >= SPILL_AT && self.spill.dir.is_some() {
            self.move_out()?;
        }
        Ok(())
    }

    fn move_out(&mut self) -> Result<()> {
        if self.moved.is_none() {
            let (file, at) = self.spill.start_record()?;
            self.moved = Some(Spilled { file, at, len: 0 });
        }
        let m = self.moved.as_mut().expect("just made");
        let bytes = &self.out[self.start..];
        m.file
            .write_all_at(bytes, m.at + m.len)
            .map_err(|e| spill_error(&self.spill.dir, e))?;
        m.len += bytes.len() as u64;
        self.out.truncate(self.start);
        Ok(())
    }

    /// Ends the record: one that was spilled is moved out whole, for its encoder to take, and
    /// the memory it took is given back.
    pub(crate) fn finish(mut self) -> Result<()> {
        if self.moved.is_some() {
            self.move_out()?;
            let spilled = self.moved.take().expect("moved out");
            if let Some((_, end)) = &mut self.spill.file {
                *end = spilled.at + spilled.len;
            }
            self.spill.done = Some(spilled);
            self.out.shrink_to(self.start + SLACK);
        }
        Ok(())
    }
}

fn spill_error(dir: &Option<Arc<Path>>, e: io::Error) -> Error {
    Error::io(dir.as_deref().unwrap_or(Path::new(".")), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_record_is_moved_out_in_steps_and_copied_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::into_dir(dir.path().into());
        let mut out = b"<record before/>".to_vec();
        let start = out.len();
        let mut sink = Sink::new(&mut out, start, &mut spill);
        let mut want = Vec::new();
        for i in 0..3 * SPILL_AT / 1000 {
            let line = format!("{i:0999}\n");
            sink.out.extend_from_slice(line.as_bytes());
            want.extend_from_slice(line.as_bytes());
            sink.relieve().unwrap();
            assert!(sink.out.len() - start <= SPILL_AT);
        }
        // Taken back past what was moved out, then on again.
        let mark = sink.len();
        sink.out.extend_from_slice(&[b'x'; SPILL_AT]);
        sink.relieve().unwrap();
        sink.truncate(mark - 10).unwrap();
        want.truncate(want.len() - 10);
        sink.out.extend_from_slice(b"</record>\n");
        want.extend_from_slice(b"</record>\n");
        assert_eq!(sink.len(), want.len() as u64);
        sink.finish().unwrap();
        assert_eq!(out, b"<record before/>", "the record left memory whole");
        let spilled = spill.take().unwrap();
        assert_eq!(spilled.len(), want.len() as u64);
        let mut copied = Vec::new();
        spilled
            .copy_into(|b| {
                copied.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
        assert_eq!(copied, want);
        // The file has no name: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // The memory the record took is given back; the records before it are kept.
        assert!(
            out.capacity() <= b"<record before/>".len() + SLACK,
            "{}",
            out.capacity()
        );
    }

    /// Moves out a record of `len` bytes of `byte` after `out`'s records.
    fn spill_one(spill: &mut Spill, out: &mut Vec<u8>, byte: u8, len: usize) -> Spilled {
        let start = out.len();
        let mut sink = Sink::new(out, start, spill);
        let mut left = len;
        while left > 0 {
            let n = left.min(SPILL_AT);
            sink.out.extend(std::iter::repeat_n(byte, n));
            sink.relieve().unwrap();
            left -= n;
        }
        sink.finish().unwrap();
        spill.take().expect("moved out")
    }

    fn copied(spilled: &Spilled) -> Vec<u8> {
        let mut all = Vec::new();
        spilled
            .copy_into(|b| {
                all.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
        all
    }

    #[test]
    fn records_waiting_share_their_threads_file_and_give_its_room_back_once_copied() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::into_dir(dir.path().into());
        let mut out = Vec::new();
        // Many records waiting at once take one descriptor, not one each.
        let waiting: Vec<Spilled> = (0..40u8)
            .map(|i| spill_one(&mut spill, &mut out, i, SPILL_AT + usize::from(i)))
            .collect();
        assert!(waiting
            .iter()
            .all(|s| Arc::ptr_eq(&s.file, &waiting[0].file)));
        let blocks = |s: &Spilled| s.file.metadata().unwrap().blocks() * 512;
        let full = blocks(&waiting[0]);
        assert!(full >= 40 * SPILL_AT as u64, "{full}");
        // Each is copied back whole, in any order; a record copied gives its room back.
        for (i, s) in waiting.iter().enumerate().rev() {
            assert!(copied(s) == vec![i as u8; SPILL_AT + i]);
        }
        let file = Arc::clone(&waiting[0].file);
        drop(waiting);
        assert!(file.metadata().unwrap().blocks() * 512 < full / 20);
        // None waits: the next record starts the file again.
        drop(file);
        let next = spill_one(&mut spill, &mut out, 7, SPILL_AT);
        assert_eq!(
            (next.at, next.file.metadata().unwrap().len()),
            (0, SPILL_AT as u64)
        );
        assert!(copied(&next) == vec![7; SPILL_AT]);
    }

    #[test]
    fn a_failed_record_leaves_nothing_and_a_thread_without_a_directory_keeps_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::into_dir(dir.path().into());
        let mut out = Vec::new();
        let mut sink = Sink::new(&mut out, 0, &mut spill);
        sink.out.extend_from_slice(&vec![b'a'; SPILL_AT + 1]);
        sink.relieve().unwrap();
        drop(sink);
        assert!(spill.take().is_none());

        let mut kept = Spill::default();
        let mut sink = Sink::new(&mut out, 0, &mut kept);
        sink.out.extend_from_slice(&vec![b'a'; SPILL_AT + 1]);
        sink.relieve().unwrap();
        sink.finish().unwrap();
        assert!(kept.take().is_none());
        assert_eq!(out.len(), SPILL_AT + 1);
    }
}
