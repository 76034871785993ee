//! Records too big to hold in memory until the writing thread takes them: moved, as they are
//! encoded, into unlinked files in the output directory (on the disk the feeds go to, not in a
//! `/tmp` that may be memory), which the writing thread copies into the feed file in their
//! turn. A spilled record knows its length, which decides the feed file it goes into.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A record's bytes held in memory before they are moved to a file: a few of these per encoding
/// thread is what a build's records take, whatever the size of their contents.
pub(crate) const SPILL_AT: usize = 4 << 20;
/// Bytes read from a spill file at a time when it is copied.
const COPY_BLOCK: usize = 1 << 20;

/// An encoding thread's spilling.
#[derive(Default)]
pub struct Spill {
    /// Where spill files go; none for an encoder whose records are not written to feed files
    /// by a writer (they then stay in memory, whatever their size).
    dir: Option<Arc<Path>>,
    /// The record last encoded, when it was moved out.
    done: Option<Spilled>,
}

impl Spill {
    /// Spilling into `dir`.
    pub(crate) fn into_dir(dir: Arc<Path>) -> Self {
        Spill {
            dir: Some(dir),
            done: None,
        }
    }

    /// The record just encoded, if it was moved out: its encoder must take it at once.
    pub(crate) fn take(&mut self) -> Option<Spilled> {
        self.done.take()
    }
}

/// A record in a file of its own.
pub(crate) struct Spilled {
    file: File,
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
        let mut file = &self.file;
        file.seek(SeekFrom::Start(0))?;
        let mut block = vec![0; COPY_BLOCK.min(self.len as usize)];
        let mut left = self.len;
        while left > 0 {
            let n = block.len().min(left as usize);
            file.read_exact(&mut block[..n])?;
            write(&block[..n])?;
            left -= n as u64;
        }
        Ok(())
    }
}

/// Where a record's bytes go as it is encoded: `out`, after the records before it, and past
/// `SPILL_AT` bytes a spill file, if the thread spills. Dropped before `finish` (the record
/// failed), it drops what it spilled.
pub(crate) struct Sink<'a> {
    pub(crate) out: &'a mut Vec<u8>,
    /// Where the record starts in `out`.
    start: usize,
    spill: &'a mut Spill,
    /// The file the record is being moved to, and its bytes there.
    file: Option<(File, u64)>,
}

impl<'a> Sink<'a> {
    /// The sink of the record that starts at `start` in `out`.
    pub(crate) fn new(out: &'a mut Vec<u8>, start: usize, spill: &'a mut Spill) -> Self {
        debug_assert!(spill.done.is_none(), "a record moved out was not taken");
        Sink {
            out,
            start,
            spill,
            file: None,
        }
    }

    /// The record's length so far.
    pub(crate) fn len(&self) -> u64 {
        self.moved() + (self.out.len() - self.start) as u64
    }

    fn moved(&self) -> u64 {
        self.file.as_ref().map_or(0, |(_, n)| *n)
    }

    /// Takes the record back to its first `len` bytes (an encoding that did not pay).
    pub(crate) fn truncate(&mut self, len: u64) -> Result<()> {
        let moved = self.moved();
        if len >= moved {
            self.out.truncate(self.start + (len - moved) as usize);
            return Ok(());
        }
        let (file, n) = self.file.as_mut().expect("bytes were moved");
        file.set_len(len)
            .and_then(|()| file.seek(SeekFrom::Start(len)).map(drop))
            .map_err(|e| spill_error(self.spill, e))?;
        *n = len;
        self.out.truncate(self.start);
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
        let spill = &*self.spill;
        let dir = spill.dir.as_deref().expect("a thread that spills");
        if self.file.is_none() {
            let file = tempfile::tempfile_in(dir).map_err(|e| spill_error(spill, e))?;
            self.file = Some((file, 0));
        }
        let (file, n) = self.file.as_mut().expect("just made");
        let bytes = &self.out[self.start..];
        file.write_all(bytes).map_err(|e| spill_error(spill, e))?;
        *n += bytes.len() as u64;
        self.out.truncate(self.start);
        Ok(())
    }

    /// Ends the record: one that was spilled is moved out whole, for its encoder to take.
    pub(crate) fn finish(mut self) -> Result<()> {
        if self.file.is_some() {
            self.move_out()?;
            let (file, len) = self.file.take().expect("moved out");
            self.spill.done = Some(Spilled { file, len });
        }
        Ok(())
    }
}

fn spill_error(spill: &Spill, e: io::Error) -> Error {
    let dir = spill.dir.as_deref().unwrap_or(Path::new("."));
    Error::io(dir, e)
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
