//! The writing thread: numbered feed files under the size cap, each finished (hashed, renamed)
//! when the next would overflow it, and the manifest at the end.

use std::fs::{self, File};
use std::io::Write;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::output::Output;
use crate::record::FeedType;

use super::set::{ManifestEntry, SetKind};
use super::tasks::{Encoded, Rec};
use super::MANIFEST;

pub(super) struct OpenFile {
    pub(super) name: String,
    pub(super) tmp: PathBuf,
    pub(super) out: Output,
    hash: Hasher,
    pub(super) feedtype: FeedType,
    pub(super) bytes: u64,
    pub(super) records: u64,
}

impl OpenFile {
    /// Writes a header, a footer or a block of a record moved out of memory, and hashes it.
    fn write_own(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.write_record(data)?;
        self.hash.send(ToHash::Bytes(data.to_vec()));
        Ok(())
    }

    /// Writes a record; its hashing is asked for by job (see `Files::append`).
    fn write_record(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.out.write_all(data)?;
        self.bytes += data.len() as u64;
        Ok(())
    }
}

/// Bytes of a feed file to hash, in file order: a header or footer, or records of a job (by
/// their rank among the job's records), shared with the writing thread.
enum ToHash {
    Bytes(Vec<u8>),
    Records(Arc<Vec<Encoded>>, Range<usize>),
}

/// A feed file's SHA-256, made on a thread of its own. On the writing thread, hashing was most
/// of its CPU (94%, 1.7 GB/s) and came on top of its direct writes: where the output grows
/// faster than that (files sent as base64 as they are, without deflate), the encoding threads
/// waited for it. Here a file is hashed while it is written, and a finished file's hash is
/// completed beside the next file's.
struct Hasher {
    bytes: Option<SyncSender<ToHash>>,
    thread: JoinHandle<String>,
}

impl Hasher {
    fn start() -> std::io::Result<Self> {
        // A few jobs behind at most: each holds its encoded records until hashed.
        let (bytes, queue) = sync_channel::<ToHash>(2);
        let thread = std::thread::Builder::new()
            .name("fastfeed-hash".into())
            .spawn(move || {
                let mut hash = Sha256::new();
                for part in queue {
                    match part {
                        ToHash::Bytes(bytes) => hash.update(&bytes),
                        ToHash::Records(job, ranks) => {
                            let records = job.iter().flat_map(Encoded::records);
                            for (_, record) in records.skip(ranks.start).take(ranks.len()) {
                                match record {
                                    Rec::Held(bytes) => hash.update(bytes),
                                    // Sent as `Bytes` as they are copied (see `Files::append`).
                                    Rec::Spilled(_) => panic!("a record moved out among held ones"),
                                }
                            }
                        }
                    }
                }
                format!("{:x}", hash.finalize())
            })?;
        Ok(Hasher {
            bytes: Some(bytes),
            thread,
        })
    }

    fn send(&self, part: ToHash) {
        // A hashing thread that stopped (it cannot fail but by a bug) is reported by `finish`.
        if let Some(bytes) = &self.bytes {
            let _ = bytes.send(part);
        }
    }

    /// The hash, once every byte sent was hashed.
    fn finish(mut self) -> Result<String> {
        self.bytes = None;
        self.thread
            .join()
            .map_err(|_| Error::Config("a feed file's hashing thread failed".into()))
    }
}

/// A file closed and published, whose hash may not be done yet: its entry, at `at` in the
/// manifest, waits for it.
pub(super) struct Closed {
    at: usize,
    hash: Hasher,
}

/// Writes encoded records into numbered files under the cap: the sequential half of the writer.
pub(super) struct Files {
    pub(super) set: SetKind,
    pub(super) dir: PathBuf,
    pub(super) datasource: String,
    /// The set's feed type, which its first file carries.
    pub(super) feedtype: FeedType,
    pub(super) max_bytes: u64,
    pub(super) max_records: u64,
    pub(super) current: Option<OpenFile>,
    pub(super) entries: Vec<ManifestEntry>,
}

impl Files {
    /// The most a file's header and footer take, whichever file it is.
    pub(super) fn overhead(&self) -> u64 {
        let header = |feedtype| self.set.header(&self.datasource, feedtype).len();
        (header(self.feedtype).max(header(FeedType::Incremental)) + self.set.footer().len()) as u64
    }

    /// Appends encoded records in order; returns the files finished meanwhile.
    pub(super) fn append(&mut self, encoded: Vec<Encoded>) -> Result<Vec<ManifestEntry>> {
        let job = Arc::new(encoded);
        let mut closed = Vec::new();
        // The job's records from `from` on are not yet asked of the current file's hasher.
        let mut from = 0;
        let hash_to = |file: &OpenFile, from: usize, to: usize| {
            if to > from {
                file.hash.send(ToHash::Records(Arc::clone(&job), from..to));
            }
        };
        for (rank, (_, rec)) in job.iter().flat_map(Encoded::records).enumerate() {
            let len = rec.len();
            let full = self.current.as_ref().is_some_and(|f| {
                f.records > 0
                    && (f.bytes + len + self.set.footer().len() as u64 > self.max_bytes
                        || (self.max_records > 0 && f.records >= self.max_records))
            });
            if full {
                hash_to(self.current.as_ref().expect("full"), from, rank);
                from = rank;
                closed.push(self.close_current()?);
            }
            if self.current.is_none() {
                self.open_next()?;
            }
            let file = self.current.as_mut().expect("a file is open");
            match rec {
                Rec::Held(bytes) => file.write_record(bytes),
                Rec::Spilled(spilled) => {
                    // Read back from its file, a block at a time: hashed as it is copied, after
                    // the records before it.
                    hash_to(file, from, rank);
                    from = rank + 1;
                    spilled.copy_into(|bytes| file.write_own(bytes))
                }
            }
            .map_err(|e| Error::io(&file.tmp, e))?;
            file.records += 1;
        }
        if let Some(file) = &self.current {
            hash_to(file, from, job.iter().map(|e| e.ends.len()).sum());
        }
        // A file is reported with the job that finished it, as soon as it is hashed.
        closed.into_iter().map(|c| self.hashed(c)).collect()
    }

    /// The entry of a file closed, with its hash.
    fn hashed(&mut self, closed: Closed) -> Result<ManifestEntry> {
        let entry = &mut self.entries[closed.at];
        entry.sha256 = closed.hash.finish()?;
        Ok(entry.clone())
    }

    pub(super) fn open_next(&mut self) -> Result<()> {
        let seq = self.entries.len() + 1;
        // Pushing a full feed replaces the whole datasource, so only the first file of a split
        // full feed may be full; the others add to it.
        let feedtype = if self.feedtype == FeedType::Full && seq > 1 {
            FeedType::Incremental
        } else {
            self.feedtype
        };
        let name = self.set.file_name(&self.datasource, seq);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let out = Output::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let hash = Hasher::start()
            .map_err(|e| Error::Config(format!("cannot start a hashing thread: {e}")))?;
        let mut file = OpenFile {
            name,
            tmp,
            out,
            hash,
            feedtype,
            bytes: 0,
            records: 0,
        };
        let header = self.set.header(&self.datasource, feedtype);
        file.write_own(&header)
            .map_err(|e| Error::io(&file.tmp, e))?;
        self.current = Some(file);
        Ok(())
    }

    /// Closes and publishes the current file; its hash may still be in the making.
    pub(super) fn close_current(&mut self) -> Result<Closed> {
        let mut file = self.current.take().expect("a file is open");
        let tmp = file.tmp.clone();
        let path = self.dir.join(&file.name);
        let published = file
            .write_own(self.set.footer())
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
            sha256: String::new(),
            kind: self.set,
        };
        self.entries.push(entry);
        Ok(Closed {
            at: self.entries.len() - 1,
            hash: file.hash,
        })
    }

    /// Closes the last file and writes the manifest; returns the files finished by this call.
    pub(super) fn finish(&mut self) -> Result<Vec<ManifestEntry>> {
        let mut finished = Vec::new();
        if self.current.is_none()
            && self.entries.is_empty()
            && self.feedtype == FeedType::Full
            && self.set.empty_full_file()
        {
            self.open_next()?;
        }
        if self.current.is_some() {
            let closed = self.close_current()?;
            finished.push(self.hashed(closed)?);
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
pub(super) enum Job {
    Append(Vec<Encoded>),
    Finish,
}

/// The file-writing thread: appends batches in order and answers each job with the files it
/// finished, or with the error that stopped it. Ends when told to finish, at the first error, or
/// when the writer is dropped (its unfinished file is then removed).
pub(super) fn write_files(
    mut files: Files,
    jobs: Receiver<Job>,
    done: Sender<Result<Vec<ManifestEntry>>>,
) {
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
