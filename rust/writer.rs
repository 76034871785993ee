//! Writes records into numbered feed files under a size cap, and the manifest that orders them.
//!
//! A batch is encoded in parallel, then appended in input order; nothing of a batch is written
//! unless every record of it encoded, so a bad record never leaves a half-written feed.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use std::cell::RefCell;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::encode::{Compress, Scratch};
use crate::error::{Error, Result};
use crate::escape::{escape_into, Context};
use crate::jsonl;
use crate::record::{EncodeOptions, FeedKind, FeedType, Record};

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_bytes: DEFAULT_MAX_BYTES,
            max_records: 0,
            compress: Compress::Auto,
            level: DEFAULT_LEVEL,
            workers: 0,
        }
    }
}

/// One finished feed file, as listed in the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestEntry {
    pub file: String,
    pub datasource: String,
    pub feedtype: FeedType,
    pub records: u64,
    pub bytes: u64,
    pub sha256: String,
}

impl ManifestEntry {
    fn to_json(&self) -> String {
        // Every field is plain ASCII by construction (file names derive from the datasource).
        format!(
            "{{\"file\":\"{}\",\"datasource\":\"{}\",\"feedtype\":\"{}\",\"records\":{},\"bytes\":{},\"sha256\":\"{}\"}}\n",
            self.file,
            self.datasource,
            self.feedtype.as_str(),
            self.records,
            self.bytes,
            self.sha256
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
    out: BufWriter<File>,
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

const FOOTER: &[u8] = b"</group>\n</gsafeed>\n";

pub struct FeedWriter {
    dir: PathBuf,
    datasource: String,
    kind: FeedKind,
    opts: Options,
    pool: rayon::ThreadPool,
    current: Option<OpenFile>,
    entries: Vec<ManifestEntry>,
}

impl FeedWriter {
    pub fn new(dir: &Path, datasource: &str, feedtype: FeedType, opts: Options) -> Result<Self> {
        check_datasource(datasource)?;
        let web = datasource == "web";
        if web && feedtype == FeedType::Full {
            return Err(Error::Config(
                "the 'web' datasource is a web feed, which is always incremental: use \
                 --feedtype incremental or metadata-and-url"
                    .into(),
            ));
        }
        if opts.max_bytes == 0 || opts.max_bytes > HARD_MAX_BYTES {
            return Err(Error::Config(format!(
                "max bytes must be between 1 and {HARD_MAX_BYTES} (the protocol refuses feeds of 1 GB)"
            )));
        }
        if opts.level > 12 {
            return Err(Error::Config(format!(
                "compression level {} is not in 0 to 12",
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
        Ok(FeedWriter {
            dir: dir.to_owned(),
            datasource: datasource.to_owned(),
            kind: FeedKind { feedtype, web },
            opts,
            pool,
            current: None,
            entries: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Files finished so far, in manifest order.
    pub fn entries(&self) -> &[ManifestEntry] {
        &self.entries
    }

    /// Records written so far, the open file's included.
    pub fn records(&self) -> u64 {
        self.entries.iter().map(|e| e.records).sum::<u64>()
            + self.current.as_ref().map_or(0, |f| f.records)
    }

    /// Bytes written so far, the open file's included.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.bytes).sum::<u64>()
            + self.current.as_ref().map_or(0, |f| f.bytes)
    }

    /// Runs `encode_one` over `items` on the worker threads and returns the encoded records in
    /// input order, or the error of the first bad one.
    fn encode_all<T: Sync>(
        &self,
        items: &[T],
        encode_one: impl Fn(&T, FeedKind, EncodeOptions, &mut Scratch, &mut Vec<u8>) -> Result<()>
            + Sync,
    ) -> Result<Vec<Vec<u8>>> {
        let kind = self.kind;
        let opts = EncodeOptions {
            compress: self.opts.compress,
        };
        let level = self.opts.level;
        let results: Vec<Result<Vec<u8>>> = self.pool.install(|| {
            items
                .par_iter()
                .with_min_len(4)
                .map(|item| {
                    let mut out = Vec::new();
                    with_scratch(level, |scratch| {
                        encode_one(item, kind, opts, scratch, &mut out)
                    })?;
                    Ok(out)
                })
                .collect()
        });
        // Not a short-circuiting collect: that would return whichever error a thread met first,
        // and the user must be shown the first bad record of the input.
        results.into_iter().collect()
    }

    /// Checks, encodes and appends a batch of records; on error nothing of the batch is
    /// written, and the error's index is the record's position in `records`.
    pub fn add_batch(&mut self, records: &[Record<'_>]) -> Result<BatchReport> {
        let indexed: Vec<(usize, &Record<'_>)> = records.iter().enumerate().collect();
        let encoded = self.encode_all(&indexed, |(index, record), kind, opts, scratch, out| {
            record.encode_into(*index, kind, opts, scratch, out)
        })?;
        self.append(encoded)
    }

    /// Parses, checks, encodes and appends a chunk of JSON Lines (whole lines only); on error
    /// nothing of the chunk is written, and the error's index is the line's position in the
    /// chunk, counting blank lines. The report's `lines` counts the chunk's lines.
    pub fn add_jsonl(&mut self, chunk: &[u8]) -> Result<BatchReport> {
        let (lines, count) = jsonl::lines(chunk);
        let encoded = self.encode_all(&lines, |(index, line), kind, opts, scratch, out| {
            jsonl::parse_line(*index, line)?.encode_into(*index, kind, opts, scratch, out)
        })?;
        let mut report = self.append(encoded)?;
        report.lines = count;
        Ok(report)
    }

    fn append(&mut self, encoded: Vec<Vec<u8>>) -> Result<BatchReport> {
        let overhead = self
            .overhead(FeedType::Incremental)
            .max(self.overhead(self.kind.feedtype));
        if let Some((index, rec)) = encoded
            .iter()
            .enumerate()
            .find(|(_, rec)| rec.len() as u64 + overhead > HARD_MAX_BYTES)
        {
            return Err(Error::record(
                index,
                None,
                format!(
                    "the record is {} bytes once encoded, which no feed under the protocol's 1 GB \
                     limit can hold (ceiling {HARD_MAX_BYTES} bytes); send it as a web feed URL instead",
                    rec.len()
                ),
            ));
        }
        let mut report = BatchReport::default();
        for (index, rec) in encoded.into_iter().enumerate() {
            let len = rec.len() as u64;
            let full = self.current.as_ref().is_some_and(|f| {
                f.records > 0
                    && (f.bytes + len + FOOTER.len() as u64 > self.opts.max_bytes
                        || (self.opts.max_records > 0 && f.records >= self.opts.max_records))
            });
            if full {
                report.finished.push(self.close_current()?);
            }
            if self.current.is_none() {
                self.open_next()?;
            }
            let file = self.current.as_mut().expect("a file is open");
            let alone = file.bytes + len + FOOTER.len() as u64;
            if file.records == 0 && alone > self.opts.max_bytes {
                report.warnings.push((
                    index,
                    format!(
                        "the record is {len} bytes once encoded: with the feed's header it makes \
                         {} a {alone} byte file, over the {} byte cap, so it goes there alone",
                        file.name, self.opts.max_bytes
                    ),
                ));
            }
            file.write(&rec).map_err(|e| Error::io(&file.tmp, e))?;
            file.records += 1;
        }
        Ok(report)
    }

    /// Header and footer bytes of a file of this type.
    fn overhead(&self, feedtype: FeedType) -> u64 {
        (self.header(feedtype).len() + FOOTER.len()) as u64
    }

    fn header(&self, feedtype: FeedType) -> Vec<u8> {
        let mut h = Vec::with_capacity(256);
        h.extend_from_slice(
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
              <!DOCTYPE gsafeed PUBLIC \"-//Google//DTD GSA Feeds//EN\" \"\">\n\
              <gsafeed>\n<header>\n<datasource>",
        );
        escape_into(&mut h, &self.datasource, Context::Text).expect("datasource names are ASCII");
        h.extend_from_slice(b"</datasource>\n<feedtype>");
        h.extend_from_slice(feedtype.as_str().as_bytes());
        h.extend_from_slice(b"</feedtype>\n</header>\n<group>\n");
        h
    }

    fn open_next(&mut self) -> Result<()> {
        let seq = self.entries.len() + 1;
        // Pushing a full feed replaces the whole datasource, so only the first file of a split
        // full feed may be full; the others add to it.
        let feedtype = if self.kind.feedtype == FeedType::Full && seq > 1 {
            FeedType::Incremental
        } else {
            self.kind.feedtype
        };
        let name = format!("{}-{seq:06}.xml", self.datasource);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let handle = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut file = OpenFile {
            name,
            tmp,
            out: BufWriter::with_capacity(1 << 20, handle),
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
        file.write(FOOTER).map_err(|e| Error::io(&tmp, e))?;
        let handle = file
            .out
            .into_inner()
            .map_err(|e| Error::io(&tmp, e.into_error()))?;
        // The rename publishes the file: it must never name a file whose bytes are not on disk.
        handle.sync_all().map_err(|e| Error::io(&tmp, e))?;
        let path = self.dir.join(&file.name);
        fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
        let entry = ManifestEntry {
            file: file.name,
            datasource: self.datasource.clone(),
            feedtype: file.feedtype,
            records: file.records,
            bytes: file.bytes,
            sha256: format!("{:x}", file.hash.finalize()),
        };
        self.entries.push(entry.clone());
        Ok(entry)
    }

    /// Closes the last file and writes the manifest. An empty full feed still gets its one
    /// (empty) file: pushing it deletes the datasource's documents, which is what it means.
    pub fn finish(mut self) -> Result<(Vec<ManifestEntry>, Vec<ManifestEntry>)> {
        let mut finished = Vec::new();
        if self.current.is_none() && self.entries.is_empty() && self.kind.feedtype == FeedType::Full
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
        Ok((std::mem::take(&mut self.entries), finished))
    }
}

impl Drop for FeedWriter {
    /// A writer dropped without `finish` leaves its finished files but no half-written one and
    /// no manifest, so the set cannot be pushed by mistake.
    fn drop(&mut self) {
        if let Some(file) = self.current.take() {
            drop(file.out);
            let _ = fs::remove_file(&file.tmp);
        }
    }
}
