//! Encoding on the pool: records and chunks of JSON Lines split into pieces, encoded on the
//! encoding threads, and checked against the size limits before anything is written.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::encode::Scratch;
use crate::error::{Error, RecordErrorKind, Result};
use crate::fingerprint::{fingerprint, snapshot_record, Fingerprints};
use crate::jsonl;
use crate::record::{EncodeOptions, FeedKind};

use super::set::SetKind;
use super::HARD_MAX_BYTES;

thread_local! {
    /// Each encoding thread's scratch, reused across records and batches.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's scratch, made for `level` if it has none or another level.
pub(super) fn with_scratch<T>(level: u8, f: impl FnOnce(&mut Scratch) -> T) -> T {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|s| s.deflater.level() != level) {
            *slot = Some(Scratch::new(level));
        }
        f(slot.as_mut().expect("just set"))
    })
}

/// What the encoding threads need to know about the files, to judge a record's size.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_bytes: u64,
    pub(super) overhead: u64,
}

/// Records encoded back to back, where each ends, and the index that names each in errors:
/// one allocation for many small records.
pub(super) struct Encoded {
    pub(super) buf: Vec<u8>,
    pub(super) ends: Vec<usize>,
    pub(super) indices: Vec<usize>,
    /// The records' fingerprints, when the writer fingerprints them (see
    /// `FeedWriter::fingerprint_records`); taken off before the records are written.
    pub(super) found: Fingerprints,
}

impl Encoded {
    /// Room for about `bytes` of encoded records (as much as their input, usually), so that the
    /// buffer is not grown, and copied, record by record.
    pub(super) fn with_capacity(bytes: usize) -> Self {
        Encoded {
            buf: Vec::with_capacity(bytes + bytes / 8),
            ends: Vec::new(),
            indices: Vec::new(),
            found: Fingerprints::default(),
        }
    }

    /// Marks the end of the record at `index`, which was just appended to `buf`.
    pub(super) fn ended(&mut self, index: usize) {
        self.ends.push(self.buf.len());
        self.indices.push(index);
    }

    pub(super) fn records(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .zip(&self.indices)
            .map(|((start, &end), &index)| (index, &self.buf[start..end]))
    }
}

/// The bytes of a chunk of JSON Lines, read by the encoding threads while the caller goes on.
/// The writer keeps a reference until every piece of the chunk is done, and the threads drop
/// theirs before they report: the last one is dropped on the caller's thread, where a Python
/// buffer must be released.
pub type SharedChunk = Arc<dyn AsRef<[u8]> + Send + Sync>;

pub(super) type Piece = Result<(Encoded, usize)>;

/// A chunk whose pieces are on the encoding threads.
pub(super) struct Started {
    pub(super) chunk: SharedChunk,
    pub(super) results: Arc<Results>,
}

/// Where a chunk's pieces leave their results. Only the last piece wakes the caller: woken by
/// every piece, it took a core from the encoding threads 16 times a chunk.
pub(super) struct Results {
    /// The results in chunk order, and how many pieces are still out.
    pub(super) slots: Mutex<(Vec<Option<Piece>>, usize)>,
    pub(super) all_in: Condvar,
}

impl Results {
    pub(super) fn new(pieces: usize) -> Self {
        Results {
            slots: Mutex::new(((0..pieces).map(|_| None).collect(), pieces)),
            all_in: Condvar::new(),
        }
    }

    pub(super) fn put(&self, at: usize, piece: Piece) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.0[at] = Some(piece);
        slots.1 -= 1;
        if slots.1 == 0 {
            self.all_in.notify_one();
        }
    }
}

impl Started {
    /// Waits for every piece; returns their results in chunk order.
    pub(super) fn wait(self) -> Vec<Piece> {
        let slots = self.results.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut slots = self
            .results
            .all_in
            .wait_while(slots, |slots| slots.1 > 0)
            .unwrap_or_else(|e| e.into_inner());
        drop(self.chunk);
        slots
            .0
            .iter_mut()
            .map(|slot| slot.take().expect("every piece reported"))
            .collect()
    }
}

/// Encodes the lines that start in `piece` of `chunk`; returns them, numbered from the piece's
/// first line, and how many lines started there. With `fingerprints`, each line is a snapshot's
/// record (see `snapshot_record`), fingerprinted from the record the encoding parsed.
pub(super) fn encode_piece(
    set: SetKind,
    (kind, enc): (FeedKind, EncodeOptions),
    fingerprints: bool,
    chunk: &[u8],
    piece: Range<usize>,
    scratch: &mut Scratch,
) -> Piece {
    let (lines, count) = jsonl::lines_in(chunk, piece.clone());
    let mut done = Encoded::with_capacity(piece.len());
    let fingerprinting = set.form().encode_record.filter(|_| fingerprints);
    for (index, line) in lines {
        let out = &mut done.buf;
        match fingerprinting {
            None => set.encode_line(index, line, kind, enc, scratch, out)?,
            Some(encode) => {
                let record = snapshot_record(index, line)?;
                let fp = fingerprint(index, &record)?;
                encode(index, &record, kind, enc, scratch, out)?;
                done.found.push(chunk, index, line, &record.url, &fp);
            }
        }
        done.ended(index);
    }
    Ok((done, count))
}

/// Runs `work` on every task on the current pool's threads, each thread with its own scratch,
/// and returns the results in task order.
pub(super) fn run_tasks<T: Sync, R: Send>(
    tasks: &[T],
    weight: impl Fn(&T) -> usize,
    level: u8,
    work: impl Fn(&T, &mut Scratch) -> R + Sync,
) -> Vec<R> {
    // Heaviest first, each thread taking the next task when it is free: a batch ends when its
    // last task does, and a big record started last would leave the other threads idle.
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by_key(|&t| std::cmp::Reverse(weight(&tasks[t])));
    let next = AtomicUsize::new(0);
    let per_thread = rayon::broadcast(|_| {
        with_scratch(level, |scratch| {
            let mut mine = Vec::new();
            while let Some(&t) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                mine.push((t, work(&tasks[t], scratch)));
            }
            mine
        })
    });
    let mut results: Vec<(usize, R)> = per_thread.into_iter().flatten().collect();
    results.sort_unstable_by_key(|(t, _)| *t);
    results.into_iter().map(|(_, r)| r).collect()
}

/// Splits `items` into runs of neighbours to encode together, with their weight: several runs
/// per thread, so that uneven records still spread over the threads, and at most 64 records a
/// run, so that small records share one buffer.
pub(super) fn runs<T>(
    items: &[(usize, T)],
    weight: impl Fn(&T) -> usize,
    threads: usize,
) -> Vec<(Range<usize>, usize)> {
    let weights: Vec<usize> = items.iter().map(|(_, item)| weight(item).max(1)).collect();
    let target = weights.iter().sum::<usize>() / (threads * 8);
    let mut runs = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, w) in weights.iter().enumerate() {
        sum += w;
        if sum >= target || i + 1 - start == 64 {
            runs.push((start..i + 1, sum));
            (start, sum) = (i + 1, 0);
        }
    }
    if start < items.len() {
        runs.push((start..items.len(), sum));
    }
    runs
}

/// Checks encoded records against the size limits; returns the warnings about them.
pub(super) fn check_sizes(encoded: &[Encoded], limits: Limits) -> Result<Vec<(usize, String)>> {
    let mut warnings = Vec::new();
    for (index, record) in encoded.iter().flat_map(Encoded::records) {
        let len = record.len() as u64;
        let alone = len + limits.overhead;
        if alone > HARD_MAX_BYTES {
            return Err(Error::refused(
                RecordErrorKind::TooLarge,
                index,
                None,
                format!(
                    "the record is {len} bytes once encoded, which no feed under the protocol's \
                     1 GB limit can hold (ceiling {HARD_MAX_BYTES} bytes); send it as a web feed \
                     URL instead"
                ),
            ));
        }
        if alone > limits.max_bytes {
            warnings.push((
                index,
                format!(
                    "the record is {len} bytes once encoded, over the {} byte cap with a feed's \
                     header: it goes alone into a file of its own",
                    limits.max_bytes
                ),
            ));
        }
    }
    Ok(warnings)
}
