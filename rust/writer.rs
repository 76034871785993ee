//! Writes records into numbered feed files under a size cap, and the manifest that orders them.
//!
//! A batch is encoded in parallel, then appended in input order; nothing of a batch is written
//! unless every record of it encoded, so a bad record never leaves a half-written feed.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use crate::encode::{Compress, Scratch};
use crate::error::{Error, RecordErrorKind, Result};
use crate::escape::{escape_into, Context};
use crate::groups::{self, Membership};
use crate::jsonl;
use crate::output::Output;
use crate::record::{AclFormat, EncodeOptions, FeedKind, FeedType, Record};
use crate::thunderstone;

thread_local! {
    /// Each encoding thread's scratch, reused across records and batches.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's scratch, made for `level` if it has none or another level.
fn with_scratch<T>(level: u8, f: impl FnOnce(&mut Scratch) -> T) -> T {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|s| s.deflater.level() != level) {
            *slot = Some(Scratch::new(level));
        }
        f(slot.as_mut().expect("just set"))
    })
}

/// The protocol refuses feeds of 1 GB and more; no file may come closer than this.
pub const HARD_MAX_BYTES: u64 = 950_000_000;
/// See the README: small enough to retry cheaply and keep the feeder's backlog granular.
pub const DEFAULT_MAX_BYTES: u64 = 50_000_000;
pub const DEFAULT_LEVEL: u8 = 1;
pub const MANIFEST: &str = "manifest.jsonl";

#[derive(Clone, Debug)]
pub struct Options {
    pub max_bytes: u64,
    /// 0 means no limit.
    pub max_records: u64,
    pub compress: Compress,
    pub level: u8,
    /// Encoding threads; 0 means one per core.
    pub workers: usize,
    pub acl_format: AclFormat,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_bytes: DEFAULT_MAX_BYTES,
            max_records: 0,
            compress: Compress::Auto,
            level: DEFAULT_LEVEL,
            workers: 0,
            acl_format: AclFormat::PerUrl,
        }
    }
}

/// What a set of files holds, which decides their form, their names and where they are pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// gsafeed files, for /xmlfeed.
    Feed,
    /// Groups feeds, for /xmlgroups; the set's source is the groupsource.
    Groups,
    /// Thunderstone `recvdata.xml` data; the set's source is the profile.
    Thunderstone,
}

impl SetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::Feed => "feed",
            SetKind::Groups => "groups",
            SetKind::Thunderstone => "thunderstone",
        }
    }
}

/// One finished feed file, as listed in the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestEntry {
    pub file: String,
    /// The datasource, or the groupsource of a groups feed.
    pub datasource: String,
    pub feedtype: FeedType,
    pub records: u64,
    pub bytes: u64,
    pub sha256: String,
    pub kind: SetKind,
}

impl ManifestEntry {
    fn to_json(&self) -> String {
        // Every field is plain ASCII by construction (file names derive from the datasource).
        format!(
            "{{\"file\":\"{}\",\"datasource\":\"{}\",\"feedtype\":\"{}\",\"records\":{},\"bytes\":{},\"sha256\":\"{}\",\"kind\":\"{}\"}}\n",
            self.file,
            self.datasource,
            self.feedtype.as_str(),
            self.records,
            self.bytes,
            self.sha256,
            self.kind.as_str()
        )
    }
}

/// What a batch did besides writing records.
#[derive(Debug, Default)]
pub struct BatchReport {
    /// Records that went alone into a file over the cap, with why.
    pub warnings: Vec<(usize, String)>,
    /// Files finished while writing this batch, in manifest order.
    pub finished: Vec<ManifestEntry>,
    /// Lines in a JSON Lines chunk, blank ones included (for numbering the next chunk's).
    pub lines: usize,
}

/// The datasource names the protocol allows: `[a-zA-Z_][a-zA-Z0-9_-]*`.
pub fn check_datasource(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "datasource '{name}' is not allowed: it must start with a letter or underscore and \
             hold only letters, digits, '_' and '-'"
        )))
    }
}

struct OpenFile {
    name: String,
    tmp: PathBuf,
    out: Output,
    hash: Sha256,
    feedtype: FeedType,
    bytes: u64,
    records: u64,
}

impl OpenFile {
    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.out.write_all(data)?;
        self.hash.update(data);
        self.bytes += data.len() as u64;
        Ok(())
    }
}

const XML_DECLARATION: &[u8] = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

/// Writes encoded records into numbered files under the cap: the sequential half of the writer.
struct Files {
    set: SetKind,
    dir: PathBuf,
    datasource: String,
    /// The set's feed type, which its first file carries.
    feedtype: FeedType,
    max_bytes: u64,
    max_records: u64,
    current: Option<OpenFile>,
    entries: Vec<ManifestEntry>,
}

impl Files {
    fn header(&self, feedtype: FeedType) -> Vec<u8> {
        let mut h = Vec::with_capacity(256);
        match self.set {
            SetKind::Feed => {}
            // The groupsource and feed type travel in the POST, as with feeds.
            SetKind::Groups => return [XML_DECLARATION, b"<xmlgroups>\n"].concat(),
            SetKind::Thunderstone => return thunderstone::HEADER.to_vec(),
        }
        h.extend_from_slice(XML_DECLARATION);
        h.extend_from_slice(
            b"<!DOCTYPE gsafeed PUBLIC \"-//Google//DTD GSA Feeds//EN\" \"\">\n\
              <gsafeed>\n<header>\n<datasource>",
        );
        escape_into(&mut h, &self.datasource, Context::Text).expect("datasource names are ASCII");
        h.extend_from_slice(b"</datasource>\n<feedtype>");
        h.extend_from_slice(feedtype.as_str().as_bytes());
        h.extend_from_slice(b"</feedtype>\n</header>\n<group>\n");
        h
    }

    fn footer(&self) -> &'static [u8] {
        match self.set {
            SetKind::Feed => b"</group>\n</gsafeed>\n",
            SetKind::Groups => b"</xmlgroups>\n",
            SetKind::Thunderstone => thunderstone::FOOTER,
        }
    }

    /// The most a file's header and footer take, whichever file it is.
    fn overhead(&self) -> u64 {
        let header = self
            .header(self.feedtype)
            .len()
            .max(self.header(FeedType::Incremental).len());
        (header + self.footer().len()) as u64
    }

    /// Appends encoded records in order; returns the files finished meanwhile.
    fn append(&mut self, encoded: Vec<Encoded>) -> Result<Vec<ManifestEntry>> {
        let mut finished = Vec::new();
        for (_, rec) in encoded.iter().flat_map(Encoded::records) {
            let len = rec.len() as u64;
            let full = self.current.as_ref().is_some_and(|f| {
                f.records > 0
                    && (f.bytes + len + self.footer().len() as u64 > self.max_bytes
                        || (self.max_records > 0 && f.records >= self.max_records))
            });
            if full {
                finished.push(self.close_current()?);
            }
            if self.current.is_none() {
                self.open_next()?;
            }
            let file = self.current.as_mut().expect("a file is open");
            file.write(rec).map_err(|e| Error::io(&file.tmp, e))?;
            file.records += 1;
        }
        Ok(finished)
    }

    fn open_next(&mut self) -> Result<()> {
        let seq = self.entries.len() + 1;
        // Pushing a full feed replaces the whole datasource, so only the first file of a split
        // full feed may be full; the others add to it.
        let feedtype = if self.feedtype == FeedType::Full && seq > 1 {
            FeedType::Incremental
        } else {
            self.feedtype
        };
        let name = match self.set {
            SetKind::Feed => format!("{}-{seq:06}.xml", self.datasource),
            SetKind::Groups => format!("{}-groups-{seq:06}.xml", self.datasource),
            SetKind::Thunderstone => format!("{}-thunderstone-{seq:06}.xml", self.datasource),
        };
        let tmp = self.dir.join(format!("{name}.tmp"));
        let out = Output::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut file = OpenFile {
            name,
            tmp,
            out,
            hash: Sha256::new(),
            feedtype,
            bytes: 0,
            records: 0,
        };
        let header = self.header(feedtype);
        file.write(&header).map_err(|e| Error::io(&file.tmp, e))?;
        self.current = Some(file);
        Ok(())
    }

    fn close_current(&mut self) -> Result<ManifestEntry> {
        let mut file = self.current.take().expect("a file is open");
        let tmp = file.tmp.clone();
        let path = self.dir.join(&file.name);
        let published = file
            .write(self.footer())
            .and_then(|()| file.out.finish())
            .map_err(|e| Error::io(&tmp, e))
            // The rename publishes the file: it must never name a file whose bytes are not on
            // disk.
            .and_then(|()| fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e)));
        if let Err(e) = published {
            // No half-written file is left behind (a full disk, say), as when the writer drops.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let entry = ManifestEntry {
            file: file.name,
            datasource: self.datasource.clone(),
            feedtype: file.feedtype,
            records: file.records,
            bytes: file.bytes,
            sha256: format!("{:x}", file.hash.finalize()),
            kind: self.set,
        };
        self.entries.push(entry.clone());
        Ok(entry)
    }

    /// Closes the last file and writes the manifest; returns the files finished by this call.
    fn finish(&mut self) -> Result<Vec<ManifestEntry>> {
        let mut finished = Vec::new();
        // An empty full feed still gets its one (empty) file: pushing it deletes the
        // datasource's documents, which is what it means. Groups feeds have no empty form
        // (`xmlgroups (membership+)`).
        if self.current.is_none()
            && self.entries.is_empty()
            && self.feedtype == FeedType::Full
            && self.set != SetKind::Groups
        {
            self.open_next()?;
        }
        if self.current.is_some() {
            finished.push(self.close_current()?);
        }
        let manifest: String = self.entries.iter().map(ManifestEntry::to_json).collect();
        let path = self.dir.join(MANIFEST);
        let tmp = self.dir.join(format!("{MANIFEST}.tmp"));
        let io = |e| Error::io(&path, e);
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(manifest.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)?;
        Ok(finished)
    }
}

impl Drop for Files {
    /// Files dropped before `finish` leave the finished files but no half-written one and no
    /// manifest, so the set cannot be pushed by mistake.
    fn drop(&mut self) {
        if let Some(file) = self.current.take() {
            drop(file.out);
            let _ = fs::remove_file(&file.tmp);
        }
    }
}

/// Work for the file-writing thread.
enum Job {
    Append(Vec<Encoded>),
    Finish,
}

/// The file-writing thread: appends batches in order and answers each job with the files it
/// finished, or with the error that stopped it. Ends when told to finish, at the first error, or
/// when the writer is dropped (its unfinished file is then removed).
fn write_files(mut files: Files, jobs: Receiver<Job>, done: Sender<Result<Vec<ManifestEntry>>>) {
    for job in jobs {
        let (result, last) = match job {
            Job::Append(encoded) => (files.append(encoded), false),
            Job::Finish => (files.finish(), true),
        };
        let failed = result.is_err();
        if done.send(result).is_err() || failed || last {
            return;
        }
    }
}

/// What the encoding threads need to know about the files, to judge a record's size.
#[derive(Clone, Copy)]
struct Limits {
    max_bytes: u64,
    overhead: u64,
}

/// Records encoded back to back, where each ends, and the index that names each in errors:
/// one allocation for many small records.
struct Encoded {
    buf: Vec<u8>,
    ends: Vec<usize>,
    indices: Vec<usize>,
}

impl Encoded {
    /// Room for about `bytes` of encoded records (as much as their input, usually), so that the
    /// buffer is not grown, and copied, record by record.
    fn with_capacity(bytes: usize) -> Self {
        Encoded {
            buf: Vec::with_capacity(bytes + bytes / 8),
            ends: Vec::new(),
            indices: Vec::new(),
        }
    }

    /// Marks the end of the record at `index`, which was just appended to `buf`.
    fn ended(&mut self, index: usize) {
        self.ends.push(self.buf.len());
        self.indices.push(index);
    }

    fn records(&self) -> impl Iterator<Item = (usize, &[u8])> {
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

type Piece = Result<(Encoded, usize)>;

/// A chunk whose pieces are on the encoding threads.
struct Started {
    chunk: SharedChunk,
    results: Arc<Results>,
}

/// Where a chunk's pieces leave their results. Only the last piece wakes the caller: woken by
/// every piece, it took a core from the encoding threads 16 times a chunk.
struct Results {
    /// The results in chunk order, and how many pieces are still out.
    slots: Mutex<(Vec<Option<Piece>>, usize)>,
    all_in: Condvar,
}

impl Results {
    fn new(pieces: usize) -> Self {
        Results {
            slots: Mutex::new(((0..pieces).map(|_| None).collect(), pieces)),
            all_in: Condvar::new(),
        }
    }

    fn put(&self, at: usize, piece: Piece) {
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
    fn wait(self) -> Vec<Piece> {
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
/// first line, and how many lines started there.
fn encode_piece(
    set: SetKind,
    kind: FeedKind,
    enc: EncodeOptions,
    chunk: &[u8],
    piece: Range<usize>,
    scratch: &mut Scratch,
) -> Piece {
    let (lines, count) = jsonl::lines_in(chunk, piece.clone());
    let mut done = Encoded::with_capacity(piece.len());
    for (index, line) in lines {
        let out = &mut done.buf;
        match set {
            SetKind::Feed => {
                jsonl::parse_line(index, line)?.encode_into(index, kind, enc, scratch, out)?
            }
            SetKind::Groups => groups::parse_line(index, line)?.encode_into(index, out)?,
            SetKind::Thunderstone => {
                thunderstone::encode_item(&jsonl::parse_line(index, line)?, index, scratch, out)?
            }
        }
        done.ended(index);
    }
    Ok((done, count))
}

/// Runs `work` on every task on the current pool's threads, each thread with its own scratch,
/// and returns the results in task order.
fn run_tasks<T: Sync, R: Send>(
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
fn runs<T>(
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
fn check_sizes(encoded: &[Encoded], limits: Limits) -> Result<Vec<(usize, String)>> {
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

pub struct FeedWriter {
    set: SetKind,
    kind: FeedKind,
    opts: Options,
    limits: Limits,
    pool: rayon::ThreadPool,
    /// Encoded batches go to a thread of their own, which writes one while the next is read
    /// and encoded: writing is one thread's work and must not leave the other cores idle.
    jobs: Option<SyncSender<Job>>,
    /// In a mutex only to make the writer `Sync`, as Python objects must be.
    done: Mutex<Receiver<Result<Vec<ManifestEntry>>>>,
    thread: Option<JoinHandle<()>>,
    /// Files the writing thread reported finished, in manifest order.
    entries: Vec<ManifestEntry>,
    /// Records and encoded bytes handed to the writing thread so far.
    taken: (u64, u64),
    /// Chunks of JSON Lines started and not yet waited for, oldest first (in a mutex for the
    /// same reason as `done`).
    started: Mutex<VecDeque<Started>>,
}

impl FeedWriter {
    /// A writer of gsafeed files for `datasource`.
    pub fn new(dir: &Path, datasource: &str, feedtype: FeedType, opts: Options) -> Result<Self> {
        check_datasource(datasource)?;
        if datasource == "web" && feedtype == FeedType::Full {
            return Err(Error::Config(
                "the 'web' datasource is a web feed, which is always incremental: use \
                 --feedtype incremental or metadata-and-url"
                    .into(),
            ));
        }
        Self::open(dir, datasource, feedtype, SetKind::Feed, opts)
    }

    /// A writer of groups feeds for `groupsource`.
    pub fn new_groups(
        dir: &Path,
        groupsource: &str,
        feedtype: FeedType,
        opts: Options,
    ) -> Result<Self> {
        check_datasource(groupsource).map_err(|_| {
            Error::Config(format!(
                "groupsource '{groupsource}' is not allowed: it must start with a letter or \
                 underscore and hold only letters, digits, '_' and '-'"
            ))
        })?;
        if feedtype == FeedType::MetadataAndUrl {
            return Err(Error::Config("a groups feed is full or incremental".into()));
        }
        Self::open(dir, groupsource, feedtype, SetKind::Groups, opts)
    }

    /// A writer of Thunderstone data for `profile`; there is no feed type (the manifest says
    /// incremental).
    pub fn new_thunderstone(dir: &Path, profile: &str, opts: Options) -> Result<Self> {
        check_datasource(profile).map_err(|_| {
            Error::Config(format!(
                "profile '{profile}' is not allowed: it must start with a letter or underscore \
                 and hold only letters, digits, '_' and '-'"
            ))
        })?;
        Self::open(
            dir,
            profile,
            FeedType::Incremental,
            SetKind::Thunderstone,
            opts,
        )
    }

    fn open(
        dir: &Path,
        source: &str,
        feedtype: FeedType,
        set: SetKind,
        opts: Options,
    ) -> Result<Self> {
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
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.workers)
            .thread_name(|i| format!("fastfeed-encode-{i}"))
            .build()
            .map_err(|e| Error::Config(format!("cannot start encoding threads: {e}")))?;
        let files = Files {
            set,
            dir: dir.to_owned(),
            datasource: source.to_owned(),
            feedtype,
            max_bytes: opts.max_bytes,
            max_records: opts.max_records,
            current: None,
            entries: Vec::new(),
        };
        let limits = Limits {
            max_bytes: opts.max_bytes,
            overhead: files.overhead(),
        };
        // One batch may wait while another is written: memory stays at a few batches.
        let (jobs, job_queue) = sync_channel(1);
        let (done_tx, done) = channel();
        let thread = std::thread::Builder::new()
            .name("fastfeed-write".into())
            .spawn(move || write_files(files, job_queue, done_tx))
            .map_err(|e| Error::Config(format!("cannot start the writing thread: {e}")))?;
        Ok(FeedWriter {
            set,
            kind: FeedKind {
                feedtype,
                web: set == SetKind::Feed && source == "web",
            },
            opts,
            limits,
            pool,
            jobs: Some(jobs),
            done: Mutex::new(done),
            thread: Some(thread),
            entries: Vec::new(),
            taken: (0, 0),
            started: Mutex::default(),
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
                Ok(result) => finished.extend(result?),
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
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job).is_ok());
        if sent == Some(true) {
            return Ok(());
        }
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
        let runs = runs(items, weight, self.pool.current_num_threads());
        let results = self.pool.install(|| {
            run_tasks(
                &runs,
                |run| run.1,
                self.opts.level,
                |run, scratch| {
                    let mut done = Encoded::with_capacity(run.1);
                    for (index, item) in &items[run.0.clone()] {
                        encode_one(*index, item, kind, enc, scratch, &mut done.buf)?;
                        done.ended(*index);
                    }
                    Ok(done)
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
    fn take(&mut self, encoded: Vec<Encoded>) -> Result<BatchReport> {
        let warnings = check_sizes(&encoded, self.limits)?;
        self.taken.0 += encoded.iter().map(|e| e.ends.len() as u64).sum::<u64>();
        self.taken.1 += encoded.iter().map(|e| e.buf.len() as u64).sum::<u64>();
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
        match self.set {
            SetKind::Feed => self.add(
                &indexed,
                |record| record.weight(),
                |index, record, kind, opts, scratch, out| {
                    record.encode_into(index, kind, opts, scratch, out)
                },
            ),
            SetKind::Thunderstone => self.add(
                &indexed,
                |record| record.weight(),
                |index, record, _, _, scratch, out| {
                    thunderstone::encode_item(record, index, scratch, out)
                },
            ),
            SetKind::Groups => Err(self.refuse("document records")),
        }
    }

    /// Starts encoding a chunk of JSON Lines (whole lines only) on the encoding threads and
    /// returns at once; `wait_jsonl` takes it, and what is taken meanwhile (`add_jsonl`,
    /// `add_batch`) goes ahead of it. Chunks started one ahead keep the threads busy while the
    /// caller takes the last one and reads the next: one at a time, each chunk ended with the
    /// threads waiting for the slowest, then for the caller, about 0.4 ms a chunk on two cores.
    pub fn start_jsonl(&mut self, chunk: SharedChunk) {
        let started = self.launch(chunk);
        self.started().push_back(started);
    }

    /// Waits for the oldest chunk started and takes it, as `add_jsonl` would have.
    pub fn wait_jsonl(&mut self) -> Result<BatchReport> {
        let started = self
            .started()
            .pop_front()
            .ok_or_else(|| Error::Config("no chunk of JSON Lines was started".into()))?;
        self.land(started)
    }

    /// Parses, checks, encodes and takes a chunk of JSON Lines (whole lines only), ahead of any
    /// chunk started and not yet waited for; on error nothing of the chunk is written, and the
    /// error's index is the line's position in the chunk, counting blank lines. The report's
    /// `lines` counts the chunk's lines.
    pub fn add_jsonl(&mut self, chunk: SharedChunk) -> Result<BatchReport> {
        let started = self.launch(chunk);
        self.land(started)
    }

    fn started(&mut self) -> &mut VecDeque<Started> {
        self.started.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the pieces of a chunk to the encoding threads, first in, first done.
    fn launch(&self, chunk: SharedChunk) -> Started {
        let (set, kind, enc, level) = (self.set, self.kind, self.encode_options(), self.opts.level);
        let ranges = jsonl::pieces((*chunk).as_ref().len(), self.pool.current_num_threads() * 8);
        let results = Arc::new(Results::new(ranges.len()));
        for (at, piece) in ranges.into_iter().enumerate() {
            let (chunk, results) = (Arc::clone(&chunk), Arc::clone(&results));
            self.pool.spawn_fifo(move || {
                let done = catch_unwind(AssertUnwindSafe(|| {
                    with_scratch(level, |scratch| {
                        encode_piece(set, kind, enc, (*chunk).as_ref(), piece, scratch)
                    })
                }))
                .unwrap_or_else(|_| {
                    Err(Error::Config(
                        "an encoding thread failed (a bug in fastfeed: please report it)".into(),
                    ))
                });
                // Before reporting: the writer's own reference must be the last (see SharedChunk).
                drop(chunk);
                results.put(at, done);
            });
        }
        Started { chunk, results }
    }

    /// Waits for a chunk's pieces and takes them. Line numbers are counted from each piece's
    /// first line, then shifted.
    fn land(&mut self, started: Started) -> Result<BatchReport> {
        let mut encoded = Vec::new();
        let mut lines = 0;
        for result in started.wait() {
            let (mut done, count) = result.map_err(|e: Error| e.shifted(lines))?;
            done.indices.iter_mut().for_each(|i| *i += lines);
            encoded.push(done);
            lines += count;
        }
        let mut report = self.take(encoded)?;
        report.lines = lines;
        Ok(report)
    }

    /// Checks, encodes and takes a batch of group memberships, like `add_batch`.
    pub fn add_memberships(&mut self, memberships: &[Membership]) -> Result<BatchReport> {
        if self.set != SetKind::Groups {
            return Err(self.refuse("group memberships"));
        }
        let indexed: Vec<(usize, &Membership)> = memberships.iter().enumerate().collect();
        self.add(
            &indexed,
            |_| 1,
            |index, membership, _, _, _, out| membership.encode_into(index, out),
        )
    }

    fn refuse(&self, what: &str) -> Error {
        Error::Config(format!(
            "this writer writes {} files: it takes no {what}",
            self.set.as_str()
        ))
    }

    /// Writes what is queued, closes the last file and writes the manifest. Returns every
    /// file, and those finished by this call.
    pub fn finish(mut self) -> Result<(Vec<ManifestEntry>, Vec<ManifestEntry>)> {
        let waiting = self.started().len();
        if waiting > 0 {
            return Err(Error::Config(format!(
                "{waiting} chunk(s) of JSON Lines were started and not waited for"
            )));
        }
        self.send(Job::Finish)?;
        self.jobs = None;
        let finished = self.collect_done(true)?;
        Ok((std::mem::take(&mut self.entries), finished))
    }
}

impl Drop for FeedWriter {
    /// Waits for the chunks still being encoded (see `SharedChunk`), stops the writing thread
    /// and waits for it, so that the unfinished file is gone (see `Files::drop`) when the writer
    /// is.
    fn drop(&mut self) {
        self.started()
            .drain(..)
            .for_each(|started| drop(started.wait()));
        self.jobs = None;
        let _ = self.join();
    }
}
