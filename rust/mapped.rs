//! Table files (Parquet, Arrow IPC) as build inputs: the file mapped and guarded while it is
//! read, and its record batches read one ahead on a thread of their own. What both readers
//! share; each format's reader is an iterator of batches over a `Mapping` (`parquet`, `ipc`).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow_array::RecordBatch;
use bytes::Bytes;
use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::guard::Guard;

/// A mapped file, guarded while it is mapped (see `guard`).
pub struct Mapping {
    guard: Option<Guard>,
    map: Mmap,
    file: File,
}

impl Mapping {
    pub fn open(path: &Path) -> Result<Arc<Mapping>> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: a file that shrinks while mapped makes reads past its new end fault; the guard
        // makes them read zeros, and `shrank` stops the reading after them. A file changed in
        // place reads as changed, as any file read while written, where checksums catch it.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let guard = Guard::new(map.as_ptr(), map.len());
        Ok(Arc::new(Mapping { guard, map, file }))
    }

    /// The mapped file as bytes that keep the mapping alive, for the readers' buffers.
    pub fn bytes(self: &Arc<Self>) -> Bytes {
        Bytes::from_owner(Shared(self.clone()))
    }

    /// Whether the file shrank since it was mapped: what was read past its new end is zeros
    /// (the guard's, or those the kernel gives for the rest of its last page), not its data.
    pub fn shrank(&self) -> bool {
        self.guard.as_ref().is_some_and(Guard::hit)
            || self
                .file
                .metadata()
                .map_or(true, |m| m.len() < self.map.len() as u64)
    }

    /// Lets the kernel take back the mapped pages from `from` to `to`, which are read: else they
    /// would count in this process's memory up to the file's size. (They stay in the page
    /// cache, and a view still pointing there finds them again.)
    pub fn release(&self, from: usize, to: usize) {
        let to = to.min(self.map.len());
        if to > from {
            // SAFETY: the mapping is of a file, read-only: pages dropped from it read the file
            // again, unchanged, if touched.
            #[cfg(unix)]
            let _ = unsafe {
                self.map
                    .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from)
            };
        }
    }

    /// `release`, of the `len` bytes at `at` where they are the mapping's (not a copy).
    pub fn release_at(&self, at: *const u8, len: usize) {
        let from = (at as usize).wrapping_sub(self.map.as_ptr() as usize);
        if from < self.map.len() {
            self.release(from, from.saturating_add(len));
        }
    }
}

/// The mapping, shared by the reader and the buffers read from it.
struct Shared(Arc<Mapping>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0.map
    }
}

/// A batch holds about this many bytes of values, and at most `MAX_ROWS` rows: the rows the
/// writer encodes at once, whose pages stay in memory while they are.
const BATCH_BYTES: usize = 4 << 20;
const MAX_ROWS: usize = 65_536;

/// The rows of a batch of about `BATCH_BYTES`, of rows of `bytes / rows` bytes on average.
pub fn batch_rows(rows: usize, bytes: usize) -> usize {
    (BATCH_BYTES.saturating_mul(rows) / bytes.max(1)).clamp(1, MAX_ROWS)
}

/// A table file's record batches, in order, read from its mapping. After an error, none.
pub trait Batches: Iterator<Item = Result<RecordBatch>> + Send {
    fn mapping(&self) -> &Mapping;
}

type Reading = (Box<dyn Batches>, Option<Result<RecordBatch>>);

/// A table file read one batch ahead, on a thread of its own: the next batch is decoded while
/// the last one is encoded. One ahead, no more: a batch in flight holds the pages its values
/// lie in (13.6 MB each in the benchmark's Parquet files), and a third one took the peak memory
/// of a build past 128 MB.
pub struct ReadAhead {
    next: Option<JoinHandle<Reading>>,
}

impl ReadAhead {
    pub fn new(file: Box<dyn Batches>) -> ReadAhead {
        ReadAhead {
            next: Some(Self::read(file)),
        }
    }

    fn read(mut file: Box<dyn Batches>) -> JoinHandle<Reading> {
        std::thread::spawn(move || {
            let batch = file.next();
            (file, batch)
        })
    }
}

impl Iterator for ReadAhead {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        let (file, batch) = match self.next.take()?.join() {
            Ok(read) => read,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        // The batch before was encoded meanwhile (this is called after): its strings are views
        // into the mapping, and a file that shrank then gave them zeros, which only the
        // mapping tells. The last batch is checked so too, when the reading ends.
        if file.mapping().shrank() {
            return Some(Err(unreadable(SHRANK.into())));
        }
        if matches!(batch, Some(Ok(_))) {
            self.next = Some(Self::read(file));
        }
        batch
    }
}

pub const SHRANK: &str = "the file shrank while it was read (truncated or rewritten)";

pub fn unreadable(why: String) -> Error {
    Error::Config(format!("cannot be read whole: {why}"))
}
