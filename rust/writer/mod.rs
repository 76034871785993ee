//! Writes records into numbered feed files under a size cap, and the manifest that orders them.
//!
//! A batch is encoded in parallel, then appended in input order; nothing of a batch is written
//! unless every record of it encoded, so a bad record never leaves a half-written feed.
//!
//! `set` holds what a set is (its kind, options, manifest entries); `files` the writing thread
//! and the rotation of numbered files; `tasks` the encoding of records and chunks on the pool;
//! this module the writer that drives them.

mod files;
mod refused;
mod set;
mod tasks;

use std::collections::VecDeque;
use std::fs;
use std::ops::Range;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::encode::Scratch;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprints;
use crate::groups::Membership;
use crate::record::{EncodeOptions, FeedKind, FeedType, Record};

use files::{write_files, Backlog, Files, Job};
use refused::Refused;
use tasks::{
    check_sizes, prepare_thread, run_tasks, runs, start_chunk, start_runs, Encoded, Limits,
    LineEncoding, Recycled, Started,
};

pub use set::{check_datasource, BatchReport, ManifestEntry, Options, SetKind};
pub use tasks::SharedChunk;

pub use crate::limits::HARD_MAX_BYTES;
/// See the README: small enough to retry cheaply and keep the feeder's backlog granular.
pub const DEFAULT_MAX_BYTES: u64 = 50_000_000;
pub const DEFAULT_LEVEL: u8 = 1;
pub const MANIFEST: &str = "manifest.jsonl";

pub struct FeedWriter {
    set: SetKind,
    kind: FeedKind,
    opts: Options,
    limits: Limits,
    /// Shared with the reading threads, which start the pieces of the chunks they plan.
    pool: Arc<rayon::ThreadPool>,
    /// Encoded batches go to a thread of their own, which writes one while the next is read
    /// and encoded: writing is one thread's work and must not leave the other cores idle.
    jobs: Option<Sender<Job>>,
    /// What the jobs waiting for the writing thread hold, which bounds them.
    backlog: Arc<Backlog>,
    /// In a mutex only to make the writer `Sync`, as Python objects must be.
    done: Mutex<Receiver<Result<Vec<ManifestEntry>>>>,
    thread: Option<JoinHandle<()>>,
    /// Files the writing thread reported finished, in manifest order.
    entries: Vec<ManifestEntry>,
    /// Records and encoded bytes handed to the writing thread so far.
    taken: (u64, u64),
    /// Chunks of JSON Lines started and not yet waited for, oldest first (in a mutex for the
    /// same reason as `done`).
    started: Mutex<VecDeque<Chunk>>,
    /// Whether records taken as JSON Lines are fingerprinted (`fingerprint_records`).
    fingerprints: bool,
    /// Fingerprints of the records taken since `take_fingerprints` was last called.
    found: Fingerprints,
    /// Whether a refused line of JSON Lines is set aside rather than failing its chunk
    /// (`skip_refused`).
    skip: bool,
    /// The lines set aside and not yet handed over by `take_refused`.
    refused: Refused,
    /// The lines of the last chunk of JSON Lines that failed which were written before it
    /// failed (`written_before_error`).
    written: usize,
    /// Whether the writing thread stopped on an error: it ends at its first, its unfinished
    /// file with it (see `files::write_files`), so nothing handed to it after its last finished
    /// file is written.
    writing_failed: bool,
    /// Files finished by the rounds of a chunk that then failed, reported with the next batch.
    unreported: Vec<ManifestEntry>,
    /// Why the set is refused if it is finished with no records, if it is
    /// (`SetKind::refuse_empty`).
    refuse_empty: Option<String>,
}

impl FeedWriter {
    /// A writer of gsafeed files for `datasource`.
    pub fn new(dir: &Path, datasource: &str, feedtype: FeedType, opts: Options) -> Result<Self> {
        Self::create(SetKind::Feed, dir, datasource, feedtype, opts)
    }

    /// A writer of a set of `set`'s kind for `source` (its datasource, groupsource or profile:
    /// see `SetKind`).
    pub fn create(
        set: SetKind,
        dir: &Path,
        source: &str,
        feedtype: FeedType,
        opts: Options,
    ) -> Result<Self> {
        let kind = set.feed_kind(source, feedtype)?;
        let refuse_empty = set.refuse_empty(source, kind.feedtype, opts.allow_empty_full);
        if opts.max_bytes == 0 || opts.max_bytes > HARD_MAX_BYTES {
            return Err(Error::Config(format!(
                "max bytes must be between 1 and {HARD_MAX_BYTES} (the protocol refuses feeds of 1 GB)"
            )));
        }
        if !(1..=12).contains(&opts.level) {
            return Err(Error::Config(format!(
                "compression level {} is not in 1 to 12",
                opts.level
            )));
        }
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let taken = fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok())
            .any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name == MANIFEST || name.ends_with(".xml") || name.ends_with(".xml.tmp")
            });
        if taken {
            return Err(Error::Config(format!(
                "{} already holds a feed set; build into a new or empty directory so that files \
                 of two builds never mix",
                dir.display()
            )));
        }
        tasks::make_room_for_opened_files(dir);
        let (level, spill_dir) = (opts.level, Arc::<Path>::from(dir));
        let recycled = Arc::new(Recycled::default());
        let threads_recycled = Arc::clone(&recycled);
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(opts.workers)
                .thread_name(|i| format!("fastfeed-encode-{i}"))
                .start_handler(move |_| prepare_thread(level, &spill_dir, &threads_recycled))
                .build()
                .map_err(|e| Error::Config(format!("cannot start encoding threads: {e}")))?,
        );
        let files = Files {
            set,
            dir: dir.to_owned(),
            datasource: source.to_owned(),
            feedtype: kind.feedtype,
            max_bytes: opts.max_bytes,
            max_records: opts.max_records,
            current: None,
            entries: Vec::new(),
            recycled,
            blocks: None,
        };
        let limits = Limits {
            max_bytes: opts.max_bytes,
            overhead: files.overhead(),
        };
        // Batches wait to be written up to a few MB of memory (see `Backlog`).
        let (jobs, job_queue) = channel();
        let (done_tx, done) = channel();
        let backlog = Arc::new(Backlog::new());
        let written = Arc::clone(&backlog);
        let thread = std::thread::Builder::new()
            .name("fastfeed-write".into())
            .spawn(move || write_files(files, job_queue, done_tx, &written))
            .map_err(|e| Error::Config(format!("cannot start the writing thread: {e}")))?;
        Ok(FeedWriter {
            set,
            kind,
            opts,
            limits,
            pool,
            jobs: Some(jobs),
            backlog,
            done: Mutex::new(done),
            thread: Some(thread),
            entries: Vec::new(),
            taken: (0, 0),
            started: Mutex::default(),
            fingerprints: false,
            skip: false,
            refused: Refused::default(),
            found: Fingerprints::default(),
            written: 0,
            writing_failed: false,
            unreported: Vec::new(),
            refuse_empty,
        })
    }

    /// Files finished so far, in manifest order.
    pub fn entries(&self) -> &[ManifestEntry] {
        &self.entries
    }

    /// Records taken so far (written, or encoded and about to be).
    pub fn records(&self) -> u64 {
        self.taken.0
    }

    /// Encoded bytes of the records taken so far (file headers not counted).
    pub fn bytes(&self) -> u64 {
        self.taken.1
    }

    /// From now on (`on`), or no longer, reads each record taken as JSON Lines as a snapshot's
    /// (a delete or an update is refused) and fingerprints it on the encoding threads, from the
    /// record the encoding parsed: `take_fingerprints` hands them over. Off by default: a
    /// plain build pays nothing for it. Chunks already started keep their setting.
    pub fn fingerprint_records(&mut self, on: bool) -> Result<()> {
        if on && self.set.form().encode_record.is_none() {
            return Err(Error::Config(format!(
                "this writer writes {} files: only document records have fingerprints",
                self.set.as_str()
            )));
        }
        self.fingerprints = on;
        Ok(())
    }

    /// From now on (`on`), or no longer, a refused line of a chunk of JSON Lines is set aside
    /// (`take_refused` hands it over) and the chunk's other lines are taken, in one pass;
    /// otherwise the chunk fails at its first refused line. Chunks already started keep their
    /// setting.
    pub fn skip_refused(&mut self, on: bool) {
        self.skip = on;
    }

    /// The refusals (`Error::Record`) of up to `most` of the lines set aside and not yet
    /// handed over, in input order, each indexed by its line in its chunk (take them after
    /// each chunk, until none is left, whether it failed or not). Of a chunk that failed, only
    /// the lines written before it failed (`written_before_error`) are among them: they are
    /// taken, and a caller that goes on from there must still be told of those refused.
    pub fn take_refused(&mut self, most: usize) -> Vec<Error> {
        self.refused.take(most)
    }

    /// The fingerprints of the records taken since last asked, in input order; each names its
    /// line and span in the chunk that carried it (take them after each chunk).
    pub fn take_fingerprints(&mut self) -> Fingerprints {
        std::mem::take(&mut self.found)
    }

    /// Files the writing thread finished since last asked, or the error that stopped it.
    fn collect_done(&mut self, wait: bool) -> Result<Vec<ManifestEntry>> {
        let mut finished = Vec::new();
        loop {
            let done = self.done.get_mut().unwrap_or_else(|e| e.into_inner());
            let message = if wait {
                done.recv().map_err(|_| TryRecvError::Disconnected)
            } else {
                done.try_recv()
            };
            match message {
                Ok(Ok(files)) => finished.extend(files),
                Ok(Err(e)) => {
                    self.writing_failed = true;
                    return Err(e);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    if self.thread.as_ref().is_some_and(JoinHandle::is_finished) || wait {
                        self.join()?;
                    }
                    break;
                }
            }
        }
        self.entries.extend(finished.iter().cloned());
        Ok(finished)
    }

    fn join(&mut self) -> Result<()> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(_)) => Err(Error::Config("the file-writing thread failed".into())),
            _ => Ok(()),
        }
    }

    /// Hands a job to the writing thread; if it has stopped, returns the error that stopped it.
    fn send(&mut self, job: Job) -> Result<()> {
        self.backlog.admit(&job);
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job).is_ok());
        if sent == Some(true) {
            return Ok(());
        }
        self.writing_failed = true;
        self.collect_done(true)?;
        Err(Error::Config("the file-writing thread has stopped".into()))
    }

    /// Encodes `items` and hands them to the writing thread. On error nothing of this batch
    /// is written.
    fn add<T: Sync>(
        &mut self,
        items: &[(usize, T)],
        weight: impl Fn(&T) -> usize,
        encode_one: impl Fn(usize, &T, FeedKind, EncodeOptions, &mut Scratch, &mut Vec<u8>) -> Result<()>
            + Sync,
    ) -> Result<BatchReport> {
        let (kind, enc) = (self.kind, self.encode_options());
        let weights = items.iter().map(|(_, item)| weight(item));
        let runs = runs(weights, self.pool.current_num_threads());
        let results = self.pool.install(|| {
            run_tasks(
                &runs,
                |run| run.1,
                self.opts.level,
                |(run, weight), scratch| {
                    encode_run(
                        run.clone(),
                        *weight,
                        |i| items[i].0,
                        scratch,
                        |i, scratch, out| {
                            encode_one(items[i].0, &items[i].1, kind, enc, scratch, out)
                        },
                    )
                },
            )
        });
        // Not a short-circuiting collect: that would return whichever error a thread met first,
        // and the user must be shown the first bad record of the input.
        let encoded = results.into_iter().collect::<Result<Vec<_>>>()?;
        self.take(encoded)
    }

    fn encode_options(&self) -> EncodeOptions {
        EncodeOptions {
            compress: self.opts.compress,
            acl_format: self.opts.acl_format,
        }
    }

    /// Checks the sizes of encoded records and hands them to the writing thread.
    fn take(&mut self, mut encoded: Vec<Encoded>) -> Result<BatchReport> {
        let mut warnings = check_sizes(&encoded, self.limits)?;
        for done in &mut encoded {
            self.found.append(&mut done.found);
            warnings.extend(done.take_warnings());
        }
        // In the records' order, whatever each is about.
        warnings.sort_by_key(|&(index, _)| index);
        self.taken.0 += encoded.iter().map(|e| e.ends.len() as u64).sum::<u64>();
        self.taken.1 += encoded.iter().map(Encoded::bytes).sum::<u64>();
        self.send(Job::Append(encoded))?;
        Ok(BatchReport {
            warnings,
            finished: self.collect_done(false)?,
            lines: 0,
        })
    }

    /// Checks, encodes and takes a batch of records; on error nothing of the batch is
    /// written, and the error's index is the record's position in `records`.
    pub fn add_batch(&mut self, records: &[Record<'_>]) -> Result<BatchReport> {
        let indexed: Vec<(usize, &Record<'_>)> = records.iter().enumerate().collect();
        self.add_records(&indexed, |r| r.weight(), |_, r, encode| encode(r))
    }

    /// Like `add_batch`, for records made on the encoding threads from `items`, each with the
    /// index that names it in errors: `with_record` makes an item's record and gives it to
    /// `encode` (rows of Arrow data, read in place). `weight` says about how much work an item is.
    pub fn add_records<T: Sync>(
        &mut self,
        items: &[(usize, T)],
        weight: impl Fn(&T) -> usize,
        with_record: impl Fn(usize, &T, &mut dyn FnMut(&Record<'_>) -> Result<()>) -> Result<()> + Sync,
    ) -> Result<BatchReport> {
        let Some(encode) = self.set.form().encode_record else {
            return Err(self.refuse("document records"));
        };
        self.add(items, weight, |index, item, kind, enc, scratch, out| {
            with_record(index, item, &mut |record| {
                encode(index, record, kind, enc, scratch, out)
            })
        })
    }

    /// Like `add_records`, returning at once: the items of `source` (records, or memberships)
    /// are made and encoded on the encoding threads while the caller goes on (reads the next
    /// batch, takes the one before). `land_records` takes them; batches started and landed in
    /// turn keep the threads busy, where one at a time each ended with the threads waiting for
    /// the slowest.
    pub fn start_records<S: RecordSource>(&self, source: Arc<S>) -> Result<StartedRecords<S>> {
        let form = self.set.form();
        let encode = match (S::MEMBERSHIPS, form.encode_record) {
            (false, Some(encode)) => Some(encode),
            (false, None) => return Err(self.refuse("document records")),
            (true, _) if form.memberships => None,
            (true, _) => return Err(self.refuse("group memberships")),
        };
        let (kind, enc) = (self.kind, self.encode_options());
        let weights = (0..source.count()).map(|i| source.weight(i));
        let runs = runs(weights, self.pool.current_num_threads());
        let work = move |source: &S, run: Range<usize>, weight, scratch: &mut Scratch| {
            encode_run(
                run,
                weight,
                |i| source.index(i),
                scratch,
                |i, scratch, out| {
                    let index = source.index(i);
                    source.with_item(i, &mut |item| match (item, encode) {
                        (Item::Record(record), Some(encode)) => {
                            encode(index, record, kind, enc, scratch, out)
                        }
                        (Item::Membership(m), None) => m.encode_into(index, out),
                        _ => unreachable!("a source gives the items it says it gives"),
                    })
                },
            )
        };
        let started = start_runs(&self.pool, source, runs, self.opts.level, work);
        Ok(StartedRecords(Some(started)))
    }

    /// Waits for records started by `start_records` and takes them, as `add_records` would
    /// have; batches are taken in the order they were started.
    pub fn land_records<S>(&mut self, mut started: StartedRecords<S>) -> Result<BatchReport> {
        let pieces = started
            .0
            .take()
            .expect("started records are landed once")
            .wait();
        // The first bad record of the batch, whichever thread met it first.
        let encoded = pieces
            .into_iter()
            .map(|piece| piece.map(|(done, _)| done))
            .collect::<Result<Vec<_>>>()?;
        self.take(encoded)
    }

    /// Starts encoding a chunk of JSON Lines (whole lines only) on the encoding threads and
    /// returns at once; `wait_jsonl` takes it, and what is taken meanwhile (`add_jsonl`,
    /// `add_batch`) goes ahead of it. Chunks started one ahead keep the threads busy while the
    /// caller takes the last one and reads the next: one at a time, each chunk ended with the
    /// threads waiting for the slowest, then for the caller, about 0.4 ms a chunk on two cores.
    ///
    /// Chunks started further ahead are planned at once (their files opened and read ahead)
    /// but encoded only from the next call after fewer than `ENCODED_AHEAD` chunks are ahead of
    /// them (the caller is done with the last one taken): a chunk's plan is ready when the
    /// encoding threads are done with the chunk before, and no more chunks hold records than
    /// when chunks were started one ahead.
    pub fn start_jsonl(&mut self, chunk: SharedChunk) {
        self.open_started();
        let open = self.started().len() < ENCODED_AHEAD;
        let started = self.launch(chunk, open);
        self.started().push_back(started);
    }

    /// Lets the first `ENCODED_AHEAD` chunks started be encoded (see `start_jsonl`).
    fn open_started(&mut self) {
        for chunk in self.started().iter().take(ENCODED_AHEAD) {
            chunk.started.open();
        }
    }

    /// Waits for the oldest chunk started and takes it, as `add_jsonl` would have.
    pub fn wait_jsonl(&mut self) -> Result<BatchReport> {
        self.written = 0;
        self.open_started();
        let started = self
            .started()
            .pop_front()
            .ok_or_else(|| Error::Config("no chunk of JSON Lines was started".into()))?;
        self.land(started)
    }

    /// Parses, checks, encodes and takes a chunk of JSON Lines (whole lines only), ahead of any
    /// chunk started and not yet waited for; on error nothing of the chunk is written, and the
    /// error's index is the line's position in the chunk, counting blank lines (a refused line
    /// is no error while `skip_refused`: see `take_refused`). The report's
    /// `lines` counts the chunk's lines.
    pub fn add_jsonl(&mut self, chunk: SharedChunk) -> Result<BatchReport> {
        let started = self.launch(chunk, true);
        self.land(started)
    }

    fn started(&mut self) -> &mut VecDeque<Chunk> {
        self.started.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the pieces of a chunk to the encoding threads (see `tasks::start_chunk`), to be
    /// encoded, in all its rounds, with the writer's settings of now; unless `open`, they are
    /// planned and held back (see `tasks::start_chunk`).
    fn launch(&self, chunk: SharedChunk, open: bool) -> Chunk {
        let how = LineEncoding {
            set: self.set,
            kind: self.kind,
            enc: self.encode_options(),
            level: self.opts.level,
            fingerprints: self.fingerprints,
            skip: self.skip.then_some(self.limits.overhead),
        };
        Chunk {
            started: start_chunk(&self.pool, chunk, 0, how, open),
            how,
        }
    }

    /// How many lines of the last chunk of JSON Lines that failed (`wait_jsonl`, `add_jsonl`)
    /// were written before it failed: none, unless the chunk named more big files than one
    /// round of encoding takes (see `tasks::CHUNK_FILES`) and failed in a later round; none
    /// either when writing a feed file failed (the writer stops there). The lines
    /// before the bad one that are left to write start there.
    pub fn written_before_error(&self) -> usize {
        self.written
    }

    /// Waits for a chunk's pieces and takes them, in rounds if its plan left lines for more
    /// (then each round is written before the next is encoded: see `tasks::CHUNK_FILES`).
    fn land(&mut self, chunk: Chunk) -> Result<BatchReport> {
        self.written = 0;
        let mut report = BatchReport {
            warnings: Vec::new(),
            finished: std::mem::take(&mut self.unreported),
            lines: 0,
        };
        let Chunk { started, how } = chunk;
        let mut next = Some(started);
        while let Some(started) = next.take() {
            // The next round is planned (its files opened) while this one is encoded, and
            // encoded once this one is taken: planned after, its plan kept both encoding
            // threads waiting.
            next = started
                .rest()
                .map(|(chunk, from)| start_chunk(&self.pool, chunk, from, how, false));
            match self.land_round(started.wait(), report.lines) {
                Ok(round) => {
                    report.warnings.extend(round.warnings);
                    report.finished.extend(round.finished);
                    report.lines = round.lines;
                }
                Err(e) => {
                    // The rounds before went to the writing thread: written, unless that
                    // thread is what failed. The next round, planned, is not encoded.
                    if let Some(next) = next {
                        next.discard();
                    }
                    self.written = if self.writing_failed { 0 } else { report.lines };
                    self.unreported = report.finished;
                    return Err(e);
                }
            }
            if let Some(next) = &next {
                next.open();
            }
        }
        Ok(report)
    }

    /// Takes the pieces of a round of a chunk whose rounds before took `lines` lines. Line
    /// numbers are counted from each piece's first line, then shifted; the report's `lines`
    /// counts the chunk's lines up to the round's end.
    fn land_round(&mut self, pieces: Vec<tasks::Piece>, mut lines: usize) -> Result<BatchReport> {
        let (mut encoded, mut refused) = (Vec::new(), Vec::new());
        for result in pieces {
            let (mut done, count) = result.map_err(|e: Error| e.shifted(lines))?;
            done.indices.iter_mut().for_each(|i| *i += lines);
            done.found.shift(lines);
            refused.push((lines, std::mem::take(&mut done.refused)));
            encoded.push(done);
            lines += count;
        }
        let mut report = self.take(encoded)?;
        // Only once the round is taken: one that failed wrote none of its lines, and sets none
        // aside (taken again, it would report them again).
        for (first, piece) in refused {
            self.refused.push(first, piece);
        }
        report.lines = lines;
        Ok(report)
    }

    /// Checks, encodes and takes a batch of group memberships, like `add_batch`.
    pub fn add_memberships(&mut self, memberships: &[Membership]) -> Result<BatchReport> {
        let indexed: Vec<(usize, &Membership)> = memberships.iter().enumerate().collect();
        self.add_memberships_from(&indexed, |_| 1, |_, m, encode| encode(m))
    }

    /// Like `add_memberships`, for memberships made on the encoding threads from `items`, as
    /// `add_records` makes records (rows of Arrow data, read in place).
    pub fn add_memberships_from<T: Sync>(
        &mut self,
        items: &[(usize, T)],
        weight: impl Fn(&T) -> usize,
        with_membership: impl Fn(usize, &T, &mut dyn FnMut(&Membership) -> Result<()>) -> Result<()>
            + Sync,
    ) -> Result<BatchReport> {
        if !self.set.form().memberships {
            return Err(self.refuse("group memberships"));
        }
        self.add(items, weight, |index, item, _, _, _, out| {
            with_membership(index, item, &mut |m| m.encode_into(index, out))
        })
    }

    fn refuse(&self, what: &str) -> Error {
        Error::Config(format!(
            "this writer writes {} files: it takes no {what}",
            self.set.as_str()
        ))
    }

    /// Writes what is queued, closes the last file and writes the manifest. Returns every
    /// file, and those finished by this call. A set of no records that is refused so
    /// (`Options::allow_empty_full`) is `Error::EmptyFull`, and nothing is written (the writer
    /// is dropped, as an abort drops it), whatever added nothing: every way in meets it here.
    pub fn finish(mut self) -> Result<(Vec<ManifestEntry>, Vec<ManifestEntry>)> {
        // Ahead of the emptiness: chunks not waited for are records not counted yet.
        let waiting = self.started().len();
        if waiting > 0 {
            return Err(Error::Config(format!(
                "{waiting} chunk(s) of JSON Lines were started and not waited for"
            )));
        }
        if let (0, Some(why)) = (self.records(), self.refuse_empty.take()) {
            return Err(Error::EmptyFull(why));
        }
        self.send(Job::Finish)?;
        self.jobs = None;
        let finished = self.collect_done(true)?;
        Ok((std::mem::take(&mut self.entries), finished))
    }
}

/// How many of the chunks of JSON Lines started are encoded at once, the oldest (being waited
/// for) included (see `FeedWriter::start_jsonl`).
const ENCODED_AHEAD: usize = 2;

/// A chunk of JSON Lines on the encoding threads, and how its lines are encoded: its later
/// rounds too, whatever the writer's settings when they start.
struct Chunk {
    started: Started,
    how: LineEncoding,
}

/// Records (or group memberships, if `MEMBERSHIPS`) that `start_records` makes and encodes on
/// the encoding threads, the `i`th of them named `index(i)` in errors and about `weight(i)` of
/// work.
pub trait RecordSource: Send + Sync + 'static {
    const MEMBERSHIPS: bool;
    fn count(&self) -> usize;
    fn index(&self, i: usize) -> usize;
    fn weight(&self, i: usize) -> usize;
    /// Makes the `i`th item and gives it to `encode`.
    fn with_item(&self, i: usize, encode: &mut dyn FnMut(Item<'_, '_>) -> Result<()>)
        -> Result<()>;
}

/// An item of a `RecordSource`.
pub enum Item<'s, 'r> {
    Record(&'s Record<'r>),
    Membership(&'s Membership),
}

/// Records on the encoding threads (`FeedWriter::start_records`). Dropped before they are
/// landed, they are waited for: the last reference to their source is dropped by its owner's
/// thread (see `SharedChunk`).
pub struct StartedRecords<S>(Option<Started<Arc<S>>>);

impl<S> Drop for StartedRecords<S> {
    fn drop(&mut self) {
        if let Some(started) = self.0.take() {
            drop(started.wait());
        }
    }
}

/// Encodes the items of `run` (about `weight` of work) into one buffer: `encode(i, out)`
/// appends the `i`th, which `index(i)` names in errors.
fn encode_run(
    run: Range<usize>,
    weight: usize,
    index: impl Fn(usize) -> usize,
    scratch: &mut Scratch,
    mut encode: impl FnMut(usize, &mut Scratch, &mut Vec<u8>) -> Result<()>,
) -> Result<Encoded> {
    // A record's markup and escapes add about a third to its text (the weight): room for half
    // more, so that the buffer is not grown, and copied.
    let mut done = Encoded::recycled(weight + weight / 2);
    for i in run {
        encode(i, scratch, &mut done.buf)?;
        done.ended(index(i), scratch);
    }
    Ok(done)
}

impl Drop for FeedWriter {
    /// Lets go of the chunks started (those held back unencoded: a writer dropped on an error
    /// would encode them only to throw them away), stops the writing thread and waits for it,
    /// so that the unfinished file is gone (see `Files::drop`) when the writer is.
    fn drop(&mut self) {
        self.started()
            .drain(..)
            .for_each(|chunk| chunk.started.discard());
        self.jobs = None;
        let _ = self.join();
    }
}
