//! Encoding on the pool: records and chunks of JSON Lines split into pieces, encoded on the
//! encoding threads, and checked against the size limits before anything is written.

use std::cell::RefCell;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};

use crate::encode::Scratch;
use crate::error::{Error, RecordErrorKind, Result};
use crate::fingerprint::{fingerprint_opened, snapshot_record, Fingerprints};
use crate::jsonl;
use crate::record::{EncodeOptions, FeedKind, OpenedFile};
use crate::spill::{Spill, Spilled};

use super::refused::Refusals;
use super::set::SetKind;
use super::HARD_MAX_BYTES;

thread_local! {
    /// Each encoding thread's scratch, reused across records and batches.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
    /// The buffers the writer of an encoding thread's pool gives back (see `Recycled`).
    static RECYCLED: RefCell<Option<Arc<Recycled>>> = const { RefCell::new(None) };
}

/// Buffers above this size are mapped and unmapped by malloc on their own: see `with_scratch`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 4 << 20;

/// Gives a writer's encoding thread its scratch, made for the writer's `level`, whose records
/// spill into the writer's directory (see `spill`), and the buffers the writer gives back.
pub(super) fn prepare_thread(level: u8, dir: &Arc<std::path::Path>, recycled: &Arc<Recycled>) {
    SCRATCH.with(|cell| {
        let mut scratch = Scratch::new(level);
        scratch.spill = Spill::into_dir(Arc::clone(dir));
        *cell.borrow_mut() = Some(scratch);
    });
    RECYCLED.with(|cell| *cell.borrow_mut() = Some(Arc::clone(recycled)));
}

/// Buffers of encoded records that the writing thread gives back once it has written them, for
/// the encoding threads to fill again. A fresh buffer costs a page fault (and the zeroing of a
/// page by the kernel) every 4 KB it is written: 0.15 faults a record of 1 KB, and they came
/// back with every batch, as glibc hands the freed memory back to the kernel. What is kept is
/// never more than was in flight at once, and at most `KEPT_BYTES`.
#[derive(Default)]
pub(super) struct Recycled(Mutex<(Vec<Vec<u8>>, usize)>);

/// The most the kept buffers hold: about the groups of rows in flight at once (see
/// `arrow::feed`). Only buffers of runs of small records are kept, whose page faults cost the
/// most for their work: kept, big ones took 10 MB more peak RSS building Parquet files of mixed
/// records.
const KEPT_BYTES: usize = 24 << 20;
const KEPT_BUFFER: usize = 256 << 10;
/// New buffers' sizes are multiples of this.
const SIZE_STEP: usize = 16 << 10;

impl Recycled {
    /// A buffer with room for `bytes`: the last one given back that has it, if any. Not a
    /// smaller one grown: `realloc` copies its whole old size, into fresh pages. Where none
    /// has room, the last one is freed, so that buffers of sizes no longer asked for are not
    /// kept.
    fn take(&self, bytes: usize) -> Vec<u8> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = kept.0.iter().rposition(|buf| buf.capacity() >= bytes) else {
            let freed = kept.0.pop().map_or(0, |buf| buf.capacity());
            kept.1 -= freed;
            drop(kept);
            // Sizes rounded up, so that a buffer fits the next runs of about its size.
            return Vec::with_capacity(bytes.next_multiple_of(SIZE_STEP));
        };
        let buf = kept.0.swap_remove(at);
        kept.1 -= buf.capacity();
        buf
    }

    /// Keeps the buffer of records written, if there is room for it.
    pub(super) fn give(
        &self,
        Encoded {
            mut buf, recycle, ..
        }: Encoded,
    ) {
        if !recycle || buf.capacity() > KEPT_BUFFER {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.1 + buf.capacity() <= KEPT_BYTES {
            buf.clear();
            kept.1 += buf.capacity();
            kept.0.push(buf);
        }
    }
}

/// Runs `f` with this thread's scratch, made for `level` if it has none or another level.
fn with_scratch<T>(level: u8, f: impl FnOnce(&mut Scratch) -> T) -> T {
    // glibc raises its mmap threshold to the size of each big buffer freed, up to 32 MB, and
    // its trim threshold to twice that: after a few big buffers, every buffer of up to 32 MB
    // comes from, and stays in, the heap of the thread that made it. Memory then grew with the
    // corpus (317 MB building 4 GB of files by path). Fixed thresholds give big buffers and
    // free heap tops back. These are the process's tunables (glibc's only: musl's malloc has
    // none), so they hold for its other allocations too: blocks over 4 MB are mapped for
    // themselves, which costs a large allocation little beside the work that fills it. What a
    // thread keeps stays under the threshold, in its heap: the file block and ISA-L's buffers
    // (about 2 MB), a record's bytes until it spills (`SPILL_AT`, 4 MB), scratch up to `KEEP`.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static FIXED: std::sync::Once = std::sync::Once::new();
        // SAFETY: mallopt only sets tunables of the allocator.
        FIXED.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, MMAP_THRESHOLD);
        });
    }
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|s| s.deflater.level() != level) {
            *slot = Some(Scratch::new(level));
        }
        let scratch = slot.as_mut().expect("just set");
        // A record moved out whose piece failed before taking it (a panic) is not the next's,
        // nor is a warning about it.
        drop(scratch.spill.take());
        scratch.warning = None;
        f(scratch)
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
    /// The records moved out of memory as they were encoded (see `spill`), by their position
    /// among the records; they take no bytes of `buf`.
    spilled: Vec<(usize, Spilled)>,
    /// The records' fingerprints, when the writer fingerprints them (see
    /// `FeedWriter::fingerprint_records`); taken off before the records are written.
    pub(super) found: Fingerprints,
    /// The lines refused, in line order, when the writer skips them (see
    /// `FeedWriter::skip_refused`); taken off before the records are written.
    pub(super) refused: Refusals,
    /// Warnings about records (`Scratch::warning`), by the record's position among them.
    warned: Vec<(usize, String)>,
    /// Whether `buf` goes back to the encoding threads once written (see `Recycled`).
    recycle: bool,
}

/// An encoded record, where it is.
pub(super) enum Rec<'a> {
    Held(&'a [u8]),
    Spilled(&'a Spilled),
}

impl Rec<'_> {
    pub(super) fn len(&self) -> u64 {
        match self {
            Rec::Held(bytes) => bytes.len() as u64,
            Rec::Spilled(spilled) => spilled.len(),
        }
    }
}

impl Encoded {
    /// Room for about `bytes` of encoded records (as much as their input, usually), so that the
    /// buffer is not grown, and copied, record by record.
    pub(super) fn with_capacity(bytes: usize) -> Self {
        Self::in_buffer(Vec::with_capacity(bytes + bytes / 8), false)
    }

    /// `with_capacity`, in a buffer the writer gave back, on its encoding threads (see
    /// `Recycled`): for records, whose runs are many and small. Not for chunks of JSON Lines,
    /// whose pieces are a few big buffers, mapped and unmapped by malloc on their own anyway.
    pub(super) fn recycled(bytes: usize) -> Self {
        let bytes = bytes + bytes / 8;
        let buf = RECYCLED.with(|cell| match &*cell.borrow() {
            Some(recycled) => recycled.take(bytes),
            None => Vec::with_capacity(bytes),
        });
        Self::in_buffer(buf, true)
    }

    fn in_buffer(buf: Vec<u8>, recycle: bool) -> Self {
        Encoded {
            buf,
            recycle,
            ends: Vec::new(),
            indices: Vec::new(),
            spilled: Vec::new(),
            found: Fingerprints::default(),
            refused: Refusals::default(),
            warned: Vec::new(),
        }
    }

    /// Marks the end of the record at `index`, which was just appended to `buf`, or moved out
    /// into the scratch's `spill`, with the scratch's warning about it.
    pub(super) fn ended(&mut self, index: usize, scratch: &mut Scratch) {
        if let Some(spilled) = scratch.spill.take() {
            self.spilled.push((self.ends.len(), spilled));
        }
        if let Some(warning) = scratch.warning.take() {
            self.warned.push((self.ends.len(), warning));
        }
        self.ends.push(self.buf.len());
        self.indices.push(index);
    }

    /// Takes the warnings about its records, each with the record's index.
    pub(super) fn take_warnings(&mut self) -> impl Iterator<Item = (usize, String)> + '_ {
        let indices = &self.indices;
        self.warned
            .drain(..)
            .map(move |(at, warning)| (indices[at], warning))
    }

    pub(super) fn records(&self) -> impl Iterator<Item = (usize, Rec<'_>)> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        let mut spilled = self.spilled.iter().peekable();
        starts.zip(&self.ends).zip(&self.indices).enumerate().map(
            move |(at, ((start, &end), &index))| {
                let rec = match spilled.next_if(|(position, _)| *position == at) {
                    Some((_, record)) => Rec::Spilled(record),
                    None => Rec::Held(&self.buf[start..end]),
                };
                (index, rec)
            },
        )
    }

    /// The bytes of its records held in memory, and of those moved out to disk.
    pub(super) fn held(&self) -> (u64, u64) {
        let spilled: u64 = self.spilled.iter().map(|(_, s)| s.len()).sum();
        (self.buf.len() as u64, spilled)
    }

    /// The encoded bytes of its records.
    pub(super) fn bytes(&self) -> u64 {
        let (memory, disk) = self.held();
        memory + disk
    }
}

/// The bytes of a chunk of JSON Lines, read by the encoding threads while the caller goes on.
/// The writer keeps a reference until every piece of the chunk is done, and the threads drop
/// theirs before they report: the last one is dropped on the caller's thread, where a Python
/// buffer must be released.
pub type SharedChunk = Arc<dyn AsRef<[u8]> + Send + Sync>;

pub(super) type Piece = Result<(Encoded, usize)>;

/// A chunk (or a batch of records) whose pieces are on the encoding threads. `keep` is what
/// they read, dropped here once they are done with it (see `SharedChunk`).
pub(super) struct Started<K = SharedChunk> {
    pub(super) keep: K,
    pub(super) results: Arc<Results>,
}

/// Where a chunk's pieces leave their results. Only the last piece wakes the caller: woken by
/// every piece, it took a core from the encoding threads 16 times a chunk.
pub(super) struct Results {
    /// The results in chunk order, and how many pieces are still out.
    pub(super) slots: Mutex<(Vec<Option<Piece>>, usize)>,
    pub(super) all_in: Condvar,
    /// Once the plan is done, where the lines it left for another round start, if it left any
    /// (see `CHUNK_FILES`).
    rest: Mutex<Option<Option<usize>>>,
    planned: Condvar,
    /// The pieces planned and held back until the chunk may be encoded (see `Started::open`),
    /// or `None` once it may.
    held: Mutex<Option<Vec<HeldPieces>>>,
}

/// Pieces planned while their chunk waited its turn to be encoded: they go to the encoding
/// threads when it comes. They reach their `Results` by a `Weak`, since it holds them: a chunk
/// let go of while held, neither opened nor discarded (a panic between), would otherwise keep
/// itself, its lines and the files opened for them.
type HeldPieces = Box<dyn FnOnce() + Send>;

impl Results {
    /// Results for `pieces`, or, while a chunk is planned, for none yet and the plan out; its
    /// pieces are held back until `open` unless `open` already.
    fn new(pieces: usize, planning: bool, open: bool) -> Self {
        Results {
            slots: Mutex::new((
                (0..pieces).map(|_| None).collect(),
                pieces + usize::from(planning),
            )),
            all_in: Condvar::new(),
            rest: Mutex::new((!planning).then_some(None)),
            planned: Condvar::new(),
            held: Mutex::new((!open).then(Vec::new)),
        }
    }

    /// Hands pieces to the encoding threads by `spawn`, now if the chunk may be encoded, or
    /// once it may.
    fn pass(&self, spawn: impl FnOnce() + Send + 'static) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(waiting) => waiting.push(Box::new(spawn)),
            None => spawn(),
        }
    }

    /// Lets the chunk be encoded: the pieces held back go to the encoding threads, in the
    /// order they were planned, and those planned after go at once.
    fn open(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // Spawned under the lock, so that a wave planned meanwhile follows those held.
        held.take().into_iter().flatten().for_each(|spawn| spawn());
    }

    /// The plan cut `pieces` more of the chunk, which follow those before; returns the first
    /// one's place.
    fn expect(&self, pieces: usize) -> usize {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let first = slots.0.len();
        slots.0.extend((0..pieces).map(|_| None));
        slots.1 += pieces;
        first
    }

    fn put(&self, at: usize, piece: Piece) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.0[at] = Some(piece);
        self.one_less(slots);
    }

    /// The plan has started every piece, and left the lines from `rest` for another round.
    fn planned(&self, rest: Option<usize>) {
        *self.rest.lock().unwrap_or_else(|e| e.into_inner()) = Some(rest);
        self.planned.notify_all();
        self.one_less(self.slots.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn one_less(&self, mut slots: std::sync::MutexGuard<'_, (Vec<Option<Piece>>, usize)>) {
        slots.1 -= 1;
        if slots.1 == 0 {
            self.all_in.notify_one();
        }
    }
}

impl<K> Started<K> {
    /// Lets the chunk's pieces be encoded, if `start_chunk` held them back.
    pub(super) fn open(&self) {
        self.results.open();
    }

    /// Waits for every piece; returns their results in chunk order.
    pub(super) fn wait(self) -> Vec<Piece> {
        self.wait_keep().0
    }

    /// `wait`, and gives back what the pieces read.
    fn wait_keep(self) -> (Vec<Piece>, K) {
        self.open();
        let slots = self.results.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut slots = self
            .results
            .all_in
            .wait_while(slots, |slots| slots.1 > 0)
            .unwrap_or_else(|e| e.into_inner());
        let pieces = slots
            .0
            .iter_mut()
            .map(|slot| slot.take().expect("every piece reported"))
            .collect();
        drop(slots);
        (pieces, self.keep)
    }
}

impl Started {
    /// Waits for the chunk's plan only; returns the chunk and where the lines it left for
    /// another round start, if it left some.
    pub(super) fn rest(&self) -> Option<(SharedChunk, usize)> {
        let rest = self.results.rest.lock().unwrap_or_else(|e| e.into_inner());
        let rest = self
            .results
            .planned
            .wait_while(rest, |rest| rest.is_none())
            .unwrap_or_else(|e| e.into_inner());
        rest.flatten().map(|from| (Arc::clone(&self.keep), from))
    }

    /// Lets go of a chunk without its results, once its plan let go of it: pieces held back
    /// (see `start_chunk`) are dropped unencoded, those already given to the encoding threads
    /// waited for, so that the last reference goes here (see `SharedChunk`).
    pub(super) fn discard(self) {
        drop(self.rest());
        let held = self
            .results
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match held {
            Some(pieces) => drop(pieces),
            None => drop(self.wait()),
        }
    }
}

/// How a writer encodes the lines of its chunks.
#[derive(Clone, Copy)]
pub(super) struct LineEncoding {
    pub(super) set: SetKind,
    pub(super) kind: FeedKind,
    pub(super) enc: EncodeOptions,
    pub(super) level: u8,
    /// Each line is a snapshot's record (see `snapshot_record`), fingerprinted from the record
    /// the encoding parsed.
    pub(super) fingerprints: bool,
    /// A refused line is set aside in its piece's `refused` and the others are encoded, rather
    /// than the piece failing; then a record no feed can hold is refused here too, with the
    /// files' overhead given (see `check_sizes`), so that none of the chunk fails later.
    pub(super) skip: Option<u64>,
}

impl LineEncoding {
    /// Encodes the lines that start in `piece` of `chunk` into about `capacity` bytes; returns
    /// them, numbered from the piece's first line, and how many lines started there.
    fn encode_piece(
        self,
        chunk: &[u8],
        piece: PlannedPiece,
        capacity: usize,
        scratch: &mut Scratch,
    ) -> Piece {
        let (lines, count) = jsonl::lines_in(chunk, piece.lines);
        let mut done = Encoded::with_capacity(capacity);
        let fingerprinting = self.set.form().encode_record.filter(|_| self.fingerprints);
        let (kind, enc) = (self.kind, self.enc);
        let mut opened = piece.files.into_iter().peekable();
        for (index, line) in lines {
            // The file the planner opened for this line, if any: its read takes it, and it is
            // closed after the line, whatever became of the record.
            let at = line.as_ptr() as usize - chunk.as_ptr() as usize;
            scratch.opened = opened
                .next_if(|(start, _)| *start == at)
                .and_then(|(_, f)| f);
            let start = done.buf.len();
            let out = &mut done.buf;
            // The record's fingerprint, when fingerprinting, is kept once the record is.
            let encoded = match fingerprinting {
                None => self
                    .set
                    .encode_line(index, line, kind, enc, scratch, out)
                    .map(|()| None),
                Some(encode) => snapshot_record(index, line).and_then(|record| {
                    let opened = scratch.opened.as_ref().and_then(OpenedFile::try_clone);
                    let fp = fingerprint_opened(index, &record, opened)?;
                    encode(index, &record, kind, enc, scratch, out)?;
                    Ok(Some((record, fp)))
                }),
            };
            scratch.opened = None;
            let (found, refused) = match (encoded, self.skip) {
                (Ok(found), Some(overhead)) => {
                    let len = scratch
                        .spill
                        .done_len()
                        .unwrap_or((done.buf.len() - start) as u64);
                    (
                        found,
                        (len + overhead > HARD_MAX_BYTES).then(|| too_large(index, len)),
                    )
                }
                (Ok(found), None) => (found, None),
                (Err(e), Some(_)) => (None, Some(e)),
                (Err(e), None) => return Err(e),
            };
            match refused {
                None => {
                    if let Some((record, fp)) = found {
                        done.found.push(chunk, index, line, &record.url, &fp);
                    }
                    done.ended(index, scratch);
                }
                Some(e) => {
                    // Nothing of the refused record stays: its bytes, its file moved out.
                    done.buf.truncate(start);
                    drop(scratch.spill.take());
                    scratch.warning = None;
                    done.refused.set_aside(e)?;
                }
            }
        }
        // Room was made for what the lines' files weigh, and records deflate or move out to
        // disk: what is left over goes back now, not once the writer is done with the piece.
        // Held until then, it was 10 MB of peak RSS where two chunks wait in rounds (a tree's
        // inline text before its files by path).
        done.buf.shrink_to_fit();
        done.refused.shrink_to_fit();
        Ok((done, count))
    }
}

/// The most a round of a chunk's encoding takes of big files (those whose records are moved out
/// of memory to wait for the writer, see `spill`) and of the others: a chunk's records all wait
/// until the last is encoded, and a few chunks are in flight, so without it the records waiting
/// took as much disk as the files of a few chunks of lines, tens of GB with big files, and as
/// much memory with files just under the big ones (3.8 GB of peak RSS for 1,000 files of
/// 2.8 MB). And so many files at most: the plan of a chunk naming 20,000 took 4 MB, which the
/// heap of each planning thread then kept (16 of them: a build's peak RSS grew by 60 MB with
/// its length). The lines past it are encoded in a round of their own once those before are
/// taken (see `FeedWriter::land`). A batch of a directory's files (`DIR_BATCH` and
/// `DIR_BATCH_BYTES` in `sets/inputs.py`: 4,096 files, or 8 MB and the file past it, under
/// `big` if its record waits in memory) is one round, as is a chunk of lines sized to what it
/// encodes to (4 MB), unless misjudged.
const CHUNK_FILES: jsonl::FileBudget = jsonl::FileBudget {
    big: crate::spill::BIG_FILE,
    bytes: 512 << 20,
    files: 128,
    held: 12 << 20,
    named: 4096,
    taken: (0, 0),
};

/// Grows this process's table of file descriptors, before the encoding threads start, to hold
/// as many as a round's plan opens ahead (`CHUNK_FILES`), over those open already. Grown by the
/// opens themselves, each doubling of a table that threads share waits for an RCU grace period
/// (`expand_fdtable`), the planning threads stopped meanwhile: a process's first build (every
/// `fastfeed build`) took 0.42 to 0.48 s on two cores, 0.39 to 0.40 once grown (session 26).
#[cfg(target_os = "linux")]
pub(super) fn make_room_for_opened_files(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let Ok(open) = std::fs::File::open(dir) else {
        return;
    };
    let wanted = table_wanted(open.as_raw_fd());
    // SAFETY: F_DUPFD makes a new descriptor, the lowest free one from `wanted` on (never one in
    // use), which is closed at once: only the table's size stays.
    unsafe {
        let fd = libc::fcntl(open.as_raw_fd(), libc::F_DUPFD_CLOEXEC, wanted);
        if fd >= 0 {
            libc::close(fd);
        }
    }
}

/// The highest descriptor the table is grown to hold, `fd` being the highest open: a round's
/// files above it, and at most the last one the limit on open files allows (F_DUPFD refuses
/// one past it, EINVAL, and grew nothing where the limit is 1,024 or 4,096, the usual ones).
/// The planner holds no more open than that limit lets it (`record::read_ahead`) anyway.
#[cfg(target_os = "linux")]
fn table_wanted(fd: libc::c_int) -> libc::c_int {
    let limit = crate::record::open_file_limit().unwrap_or(u64::MAX);
    let wanted = (fd.max(0) as u64 + CHUNK_FILES.named as u64).min(limit.saturating_sub(1));
    wanted.min(libc::c_int::MAX as u64) as libc::c_int
}

/// Elsewhere nothing is known to wait on the table's growth.
#[cfg(not(target_os = "linux"))]
pub(super) fn make_room_for_opened_files(_: &std::path::Path) {}

/// What the rounds after a chunk's first take of small files (`held` of `CHUNK_FILES`): a chunk
/// with more than one round was misjudged (lines naming files after lines that do not), and
/// each of its rounds waited in memory beside the one before, being written, and the next
/// chunk, already encoded: small files that do not deflate take 4/3 of their size as records,
/// so rounds of 12 MB of them held 16 MB each, 30 to 40 MB of a build's peak RSS (a tree's
/// inline text before its files by path, 119 to 126 MB). 4 MB gave 86 to 95 MB.
const LATER_HELD: u64 = 4 << 20;

/// Starts encoding the lines of a chunk of JSON Lines from `from` (a line start) on `pool`,
/// pieces first in, first done; returns at once. A chunk that names files is planned first on
/// the reading threads, which ask the kernel to read its files ahead and learn their sizes, so
/// that its pieces are cut by what their records cost and not by their bytes of JSON, and so
/// that a round takes no more than `CHUNK_FILES`. Planned while the chunk before is encoded, it
/// keeps many file reads in flight, however few the encoding threads. Unless `open`, the
/// pieces are planned but held back until `Started::open`: a chunk planned while two before it
/// are encoded is ready the moment its turn comes, and holds no records meanwhile.
pub(super) fn start_chunk(
    pool: &Arc<rayon::ThreadPool>,
    chunk: SharedChunk,
    from: usize,
    how: LineEncoding,
    open: bool,
) -> Started {
    let count = pool.current_num_threads() * 8;
    if !jsonl::names_files(&(*chunk).as_ref()[from..]) {
        return start_by_bytes(pool, chunk, from, count, how, open);
    }
    let results = Arc::new(Results::new(0, true, open));
    let (plan_pool, plan_chunk, plan_results) =
        (Arc::clone(pool), Arc::clone(&chunk), Arc::clone(&results));
    // A thread of its own: planning waits for the disk where the cache is cold.
    let planner = std::thread::Builder::new().name("fastfeed-plan".into());
    let planning = planner.spawn(move || {
        let bytes = (*plan_chunk).as_ref();
        // The chunk's first lines are planned and started first, with a share of its pieces:
        // where the encoding threads wait for this chunk (a build's first, or planning behind
        // them, files slow to open), they start on those while the rest are opened.
        let mid = from + (bytes.len() - from) / FIRST_WAVE;
        let first = memchr::memchr(b'\n', &bytes[mid..]).map_or(bytes.len(), |k| mid + k + 1);
        let waves = [
            (from..first, count / 4),
            (first..bytes.len(), count - count / 4),
        ];
        // What the first wave takes of the budget, the second has less of.
        let mut budget = CHUNK_FILES;
        if from > 0 {
            budget.held = LATER_HELD;
        }
        let mut rest = None;
        for (lines, pieces) in waves.into_iter().filter(|(lines, _)| !lines.is_empty()) {
            let (planned, taken) = catch_unwind(AssertUnwindSafe(|| {
                // Files past the budget are not opened: a round of a chunk naming many opens
                // only what it takes, not the rest of the chunk again and again.
                let left = budget;
                let open = |paths: &[&std::path::Path]| open_ahead(paths, left);
                jsonl::cut_within(bytes, lines.clone(), pieces, open, Some(&mut budget))
            }))
            // A plan that panicked (no thread to read ahead on) takes the wave's first line
            // alone, not the whole wave past the budget: the rest waits for a round whose plan
            // may succeed.
            .unwrap_or_else(|_| {
                let one = memchr::memchr(b'\n', &bytes[lines.clone()])
                    .map_or(lines.end, |k| lines.start + k + 1);
                (vec![by_bytes(lines.start..one)], one)
            });
            let first_piece = plan_results.expect(planned.len());
            let (pool, chunk, results) = (
                Arc::clone(&plan_pool),
                Arc::clone(&plan_chunk),
                Arc::downgrade(&plan_results),
            );
            plan_results.pass(move || {
                spawn_pieces(&pool, &chunk, &results, planned, first_piece, how);
            });
            if taken < lines.end {
                rest = Some(taken);
                break;
            }
        }
        // Before the plan reports: the writer's own reference must be the last (see SharedChunk).
        drop(plan_chunk);
        plan_results.planned(rest);
    });
    match planning {
        Ok(_) => Started {
            keep: chunk,
            results,
        },
        // No thread to plan on (out of threads): cut by bytes, as a chunk naming no file.
        Err(_) => start_by_bytes(pool, chunk, from, count, how, open),
    }
}

/// Opens the files a wave of a plan names and reads them ahead (see `record::read_ahead`), those
/// `budget` takes: on this thread alone while they open fast (in batches of 1, 2, 4... up to
/// `FAST_BATCH` files), on `read_ahead`'s threads from the first batch that opened slowly (a
/// cold cache, a network's file system). Files in the page cache open in microseconds; the 15
/// threads `read_ahead` started for each chunk of 256 KB of lines (1,000 a build of
/// `bench_files.py`'s tree) kept the encoding threads waiting on malloc's locks, which the
/// threads held as they started and ended: 37 ms of a two-core build's 0.43 s, 21 ms after.
fn open_ahead(
    paths: &[&std::path::Path],
    mut budget: jsonl::FileBudget,
) -> Vec<(u64, Option<OpenedFile>)> {
    let mut opened = Vec::with_capacity(paths.len());
    let (mut batch, mut asked) = (1, 0);
    while opened.len() < paths.len() {
        let left = &paths[opened.len()..];
        let fast = batch <= FAST_BATCH && asked < FAST_BYTES;
        let ask = if fast {
            &left[..batch.min(left.len())]
        } else {
            left
        };
        let started = std::time::Instant::now();
        let got = crate::record::read_ahead(ask, Some(budget));
        let slow = started.elapsed() > FAST_OPEN * ask.len() as u32;
        let whole = got.len() == ask.len();
        for &(size, _) in &got {
            budget.take(size);
            asked += size;
        }
        opened.extend(got);
        if !whole || !fast {
            break;
        }
        batch = if slow {
            usize::MAX
        } else {
            (batch * 2).min(FAST_BATCH)
        };
    }
    opened
}

/// The most files a batch of `open_ahead` on the planning thread alone holds.
const FAST_BATCH: usize = 32;
/// The most a file may take, on average over its batch, to be opened and read ahead, for the
/// next batch to stay on the planning thread: one in the page cache takes 5 to 15 µs, more on
/// a busy core; one whose inode is read from the disk, or over a network, much longer.
const FAST_OPEN: std::time::Duration = std::time::Duration::from_micros(100);
/// The most a plan reads ahead on its own thread: what `read_ahead` reads ahead at most for one
/// call (pages read ahead and evicted before they are read would be read twice).
const FAST_BYTES: u64 = 256 << 20;

/// Starts the lines of a chunk from `from` cut into `count` pieces of equal bytes of JSON.
fn start_by_bytes(
    pool: &Arc<rayon::ThreadPool>,
    chunk: SharedChunk,
    from: usize,
    count: usize,
    how: LineEncoding,
    open: bool,
) -> Started {
    let pieces: Vec<_> = jsonl::pieces((*chunk).as_ref().len() - from, count)
        .into_iter()
        .map(|p| by_bytes(p.start + from..p.end + from))
        .collect();
    let results = Arc::new(Results::new(pieces.len(), false, open));
    let (spawn_pool, spawn_chunk, spawn_results) = (
        Arc::clone(pool),
        Arc::clone(&chunk),
        Arc::downgrade(&results),
    );
    results.pass(move || spawn_pieces(&spawn_pool, &spawn_chunk, &spawn_results, pieces, 0, how));
    Started {
        keep: chunk,
        results,
    }
}

/// A piece of a chunk, with the files the planner opened for its lines (see `OpenedFile`).
type PlannedPiece = jsonl::Part<Option<OpenedFile>>;

/// The piece of a chunk's `lines`, costed by their bytes, with no file opened ahead.
fn by_bytes(lines: Range<usize>) -> PlannedPiece {
    PlannedPiece {
        cost: lines.len() as u64,
        lines,
        files: Vec::new(),
    }
}

/// A chunk that names files is planned in two waves: its first 1/FIRST_WAVE of bytes, then
/// the rest.
const FIRST_WAVE: usize = 8;

/// The most room reserved ahead for a piece's output.
const MAX_PIECE_CAPACITY: u64 = 16 << 20;

/// Hands `pieces` of `chunk`, the chunk's from `first` on, to the encoding threads, heaviest first:
/// a chunk ends when its last piece does, and a heavy piece started last would leave the other
/// threads idle. Called by `Results::pass`, whose caller holds the results (see `HeldPieces`).
fn spawn_pieces(
    pool: &rayon::ThreadPool,
    chunk: &SharedChunk,
    results: &Weak<Results>,
    pieces: Vec<PlannedPiece>,
    first: usize,
    how: LineEncoding,
) {
    let results = results
        .upgrade()
        .expect("pieces are passed on by their results' holder");
    let mut order: Vec<(usize, PlannedPiece)> = (first..).zip(pieces).collect();
    order.sort_by_key(|(_, piece)| std::cmp::Reverse(piece.cost));
    for (at, piece) in order {
        let chunk = Arc::clone(chunk);
        spawn_piece(pool, &results, at, how.level, move |scratch| {
            // Room for what the piece will likely take, but not a huge file's worth at once: a
            // big record grows its buffer as it goes.
            let capacity = piece.cost.min(MAX_PIECE_CAPACITY) as usize;
            how.encode_piece((*chunk).as_ref(), piece, capacity, scratch)
        });
    }
}

/// Hands piece `at` to the encoding threads: `work` runs with a thread's scratch and reports
/// to `results`. What `work` holds is dropped before it reports: the caller's own references
/// must be the last (see `SharedChunk`).
fn spawn_piece(
    pool: &rayon::ThreadPool,
    results: &Arc<Results>,
    at: usize,
    level: u8,
    work: impl FnOnce(&mut Scratch) -> Piece + Send + 'static,
) {
    let results = Arc::clone(results);
    pool.spawn_fifo(move || {
        let done =
            catch_unwind(AssertUnwindSafe(|| with_scratch(level, work))).unwrap_or_else(|_| {
                Err(Error::Config(
                    "an encoding thread failed (a bug in fastfeed: please report it)".into(),
                ))
            });
        results.put(at, done);
    });
}

/// Starts encoding the `runs` of `keep` (ranges of its items, with their weight) on `pool`,
/// heaviest first, each by `work`; returns at once. `wait` gives their results in order.
pub(super) fn start_runs<K, W>(
    pool: &rayon::ThreadPool,
    keep: Arc<K>,
    runs: Vec<(Range<usize>, usize)>,
    level: u8,
    work: W,
) -> Started<Arc<K>>
where
    K: Send + Sync + 'static,
    W: Fn(&K, Range<usize>, usize, &mut Scratch) -> Result<Encoded> + Clone + Send + 'static,
{
    let results = Arc::new(Results::new(runs.len(), false, true));
    let mut order: Vec<(usize, (Range<usize>, usize))> = runs.into_iter().enumerate().collect();
    order.sort_by_key(|(_, (_, weight))| std::cmp::Reverse(*weight));
    for (at, (run, weight)) in order {
        let (keep, work) = (Arc::clone(&keep), work.clone());
        spawn_piece(pool, &results, at, level, move |scratch| {
            Ok((work(&keep, run, weight, scratch)?, 0))
        });
    }
    Started { keep, results }
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

/// Splits items of these `weights` into runs of neighbours to encode together, with their
/// weight: several runs per thread, so that uneven records still spread over the threads, and
/// at most 64 records a run, so that small records share one buffer.
pub(super) fn runs(
    weights: impl Iterator<Item = usize>,
    threads: usize,
) -> Vec<(Range<usize>, usize)> {
    let weights: Vec<usize> = weights.map(|w| w.max(1)).collect();
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
    if start < weights.len() {
        runs.push((start..weights.len(), sum));
    }
    runs
}

/// Checks encoded records against the size limits; returns the warnings about them.
pub(super) fn check_sizes(encoded: &[Encoded], limits: Limits) -> Result<Vec<(usize, String)>> {
    let mut warnings = Vec::new();
    for (index, record) in encoded.iter().flat_map(Encoded::records) {
        let len = record.len();
        let alone = len + limits.overhead;
        if alone > HARD_MAX_BYTES {
            return Err(too_large(index, len));
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

/// The refusal of record `index`, `len` bytes once encoded: more than any feed holds.
fn too_large(index: usize, len: u64) -> Error {
    Error::refused(
        RecordErrorKind::TooLarge,
        index,
        None,
        format!(
            "the record is {len} bytes once encoded, which no feed under the protocol's 1 GB \
             limit can hold (ceiling {HARD_MAX_BYTES} bytes); send it as a web feed URL instead"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A round's budget where every file is small and counts against `held` bytes.
    fn held_budget(held: u64) -> jsonl::FileBudget {
        let (big, named) = (u64::MAX, usize::MAX);
        jsonl::FileBudget {
            big,
            held,
            named,
            ..CHUNK_FILES
        }
    }

    #[test]
    fn a_chunk_held_back_and_let_go_of_unopened_lets_go_of_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("doc.txt");
        std::fs::write(&file, "text").unwrap();
        let how = LineEncoding {
            set: SetKind::Feed,
            kind: SetKind::Feed
                .feed_kind("ds", crate::record::FeedType::Incremental)
                .unwrap(),
            enc: EncodeOptions {
                compress: crate::encode::Compress::Auto,
                acl_format: crate::record::AclFormat::PerUrl,
            },
            level: 1,
            fingerprints: false,
            skip: None,
        };
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap(),
        );
        let inline = serde_json::json!({"url": "http://a/1", "content": "text"});
        let by_path = serde_json::json!({"url": "http://a/2", "content_path": file});
        // Cut by bytes, and planned on a thread of its own.
        for line in [inline, by_path] {
            let chunk: SharedChunk = Arc::new(format!("{line}\n").into_bytes());
            let started = start_chunk(&pool, Arc::clone(&chunk), 0, how, false);
            // Planned, its pieces held back, then let go of as a panic before `open` or
            // `discard` would; the plan's thread may hold the results a moment longer.
            started.rest();
            drop(started);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while Arc::strong_count(&chunk) > 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(Arc::strong_count(&chunk), 1, "{line}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_descriptor_table_holds_a_rounds_files_before_they_are_opened() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        make_room_for_opened_files(dir.path());
        // Whatever the limit on open files (`ulimit -n` 64, 1024, 4096, 20000): up to it. The
        // grower's own descriptor was the lowest free, as this one is.
        let open = std::fs::File::open(dir.path()).unwrap();
        let wanted = table_wanted(open.as_raw_fd()) as usize;
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let size: usize = status
            .lines()
            .find_map(|line| line.strip_prefix("FDSize:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(size > wanted, "{size} <= {wanted}");
    }

    #[test]
    fn opening_ahead_in_batches_takes_the_files_in_order_up_to_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        // Past several batches (1, 2, 4, ... 32 files), file `n` of n bytes.
        let mut paths = Vec::new();
        for n in 1..=100 {
            paths.push(dir.path().join(format!("file{n}")));
            std::fs::write(&paths[n - 1], "x".repeat(n)).unwrap();
        }
        let borrowed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let all = open_ahead(&borrowed, held_budget(u64::MAX));
        let sizes: Vec<u64> = all.iter().map(|(size, _)| *size).collect();
        assert_eq!(sizes, (1..=100).collect::<Vec<u64>>());
        assert!(all.iter().all(|(_, file)| file.is_some()));
        // 1 + 2 + ... + 44 = 990 bytes fit in 1,000, the next file does not: the budget is
        // carried from batch to batch, as one call of `read_ahead` takes it.
        let some = open_ahead(&borrowed, held_budget(1000));
        let sizes: Vec<u64> = some.iter().map(|(size, _)| *size).collect();
        assert_eq!(sizes, (1..=44).collect::<Vec<u64>>());
    }
}
