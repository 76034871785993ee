//! The writing thread: numbered feed files under the size cap, each finished (synced, renamed)
//! when the next would overflow it, and the manifest at the end.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};
use crate::output::{Blocks, Output};
use crate::record::FeedType;

use super::set::{file_digest, ManifestEntry, SetKind};
use super::tasks::{Encoded, Rec, Recycled};
use super::MANIFEST;

pub(super) struct OpenFile {
    pub(super) name: String,
    pub(super) tmp: PathBuf,
    pub(super) out: Output,
    pub(super) feedtype: FeedType,
    pub(super) bytes: u64,
    pub(super) records: u64,
}

impl OpenFile {
    pub(super) fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.out.write_all(data)?;
        self.bytes += data.len() as u64;
        Ok(())
    }
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
    /// Where the buffers of the records written go back to the encoding threads.
    pub(super) recycled: Arc<Recycled>,
    /// The blocks of the last file finished, for the next one.
    pub(super) blocks: Option<Blocks>,
}

impl Files {
    /// The most a file's header and footer take, whichever file it is.
    pub(super) fn overhead(&self) -> u64 {
        let header = |feedtype| self.set.header(&self.datasource, feedtype).len();
        (header(self.feedtype).max(header(FeedType::Incremental)) + self.set.footer().len()) as u64
    }

    /// Appends encoded records in order; returns the files finished meanwhile. Records held
    /// side by side in a buffer that go into the same file are copied at once: record by
    /// record, the copies' calls cost more than the copying. Each buffer is let go (or given
    /// back, see `Recycled`) once copied, not with the job's last: a round of a chunk naming
    /// files holds up to 16 MB of records, which stayed whole beside the rounds encoded
    /// meanwhile, to the peak RSS of a build (see PERFORMANCE.md).
    pub(super) fn append(&mut self, encoded: Vec<Encoded>) -> Result<Vec<ManifestEntry>> {
        let mut finished = Vec::new();
        for batch in encoded {
            // The records of `batch.buf[run]`, counted in the file's bytes, not yet copied.
            let mut run = 0..0;
            for (_, rec) in batch.records() {
                let len = rec.len();
                let full = self.current.as_ref().is_some_and(|f| {
                    f.records > 0
                        && (f.bytes + len + self.set.footer().len() as u64 > self.max_bytes
                            || (self.max_records > 0 && f.records >= self.max_records))
                });
                if full {
                    self.copy(&batch.buf[run.clone()])?;
                    run = run.end..run.end;
                    finished.push(self.close_current()?);
                }
                if self.current.is_none() {
                    self.open_next()?;
                }
                match rec {
                    Rec::Held(bytes) => {
                        let start = bytes.as_ptr() as usize - batch.buf.as_ptr() as usize;
                        if start != run.end {
                            self.copy(&batch.buf[run])?;
                            run = start..start;
                        }
                        run.end += bytes.len();
                    }
                    Rec::Spilled(spilled) => {
                        self.copy(&batch.buf[run.clone()])?;
                        run = run.end..run.end;
                        let file = self.current.as_mut().expect("a file is open");
                        spilled
                            .copy_into(|bytes| file.out.write_all(bytes))
                            .map_err(|e| Error::io(&file.tmp, e))?;
                    }
                }
                let file = self.current.as_mut().expect("a file is open");
                file.bytes += len;
                file.records += 1;
            }
            self.copy(&batch.buf[run])?;
            self.recycled.give(batch);
        }
        Ok(finished)
    }

    /// Copies records already counted in the open file's bytes into it.
    fn copy(&mut self, records: &[u8]) -> Result<()> {
        match self.current.as_mut() {
            Some(file) if !records.is_empty() => file
                .out
                .write_all(records)
                .map_err(|e| Error::io(&file.tmp, e)),
            _ => Ok(()),
        }
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
        let blocks = self.blocks.take().unwrap_or_default();
        let out = Output::create(&tmp, blocks).map_err(|e| Error::io(&tmp, e))?;
        let mut file = OpenFile {
            name,
            tmp,
            out,
            feedtype,
            bytes: 0,
            records: 0,
        };
        let header = self.set.header(&self.datasource, feedtype);
        file.write(&header).map_err(|e| Error::io(&file.tmp, e))?;
        self.current = Some(file);
        Ok(())
    }

    pub(super) fn close_current(&mut self) -> Result<ManifestEntry> {
        let mut file = self.current.take().expect("a file is open");
        let tmp = file.tmp.clone();
        let path = self.dir.join(&file.name);
        let published = file
            .write(self.set.footer())
            .and_then(|()| file.out.finish())
            .map_err(|e| Error::io(&tmp, e))
            // The rename publishes the file: it must never name a file whose bytes are not on
            // disk.
            .and_then(|(hash, blocks)| {
                self.blocks = Some(blocks);
                fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
                Ok(hash)
            });
        let hash = match published {
            Ok(hash) => hash,
            Err(e) => {
                // No half-written file is left behind (a full disk, say), as when the writer
                // drops.
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let entry = ManifestEntry {
            file: file.name,
            datasource: self.datasource.clone(),
            feedtype: file.feedtype,
            records: file.records,
            bytes: file.bytes,
            digest: file_digest(&hash),
            kind: self.set,
        };
        self.entries.push(entry.clone());
        Ok(entry)
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
            finished.push(self.close_current()?);
        }
        let manifest: String = self.entries.iter().map(ManifestEntry::to_json).collect();
        let path = self.dir.join(MANIFEST);
        let tmp = self.dir.join(format!("{MANIFEST}.tmp"));
        let io = |e| Error::io(&path, e);
        let dir_io = |e| Error::io(&self.dir, e);
        let publish = || {
            let mut f = File::create(&tmp).map_err(io)?;
            f.write_all(manifest.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            // The files' names (their renames) on disk before the manifest names them: a crash
            // must not leave a manifest naming files that are not there.
            sync_dir(&self.dir).map_err(dir_io)?;
            fs::rename(&tmp, &path).map_err(io)?;
            // And the manifest's name, before the build says it is done; if it cannot be made
            // to last, no manifest is left, as the error says.
            sync_dir(&self.dir).map_err(|e| {
                let _ = fs::remove_file(&path);
                dir_io(e)
            })
        };
        if let Err(e) = publish() {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(finished)
    }
}

/// Syncs a directory's entries to the disk: names created or renamed in it survive a crash.
/// A file system that cannot sync a directory (EINVAL or ENOTSUP: some network and shared-folder
/// ones) orders its names itself, as PostgreSQL assumes; other errors (EIO) are errors.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    match File::open(dir)?.sync_all() {
        Err(e) if cannot_sync_dirs(&e) => Ok(()),
        done => done,
    }
}

#[cfg(unix)]
fn cannot_sync_dirs(e: &std::io::Error) -> bool {
    // EINVAL and ENOTSUP, as std names them.
    matches!(
        e.kind(),
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
    )
}

/// Elsewhere a directory cannot be opened to sync it: its file system orders what it writes.
#[cfg(not(unix))]
fn sync_dir(_: &Path) -> std::io::Result<()> {
    Ok(())
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

impl Job {
    /// What the job's records hold in memory and on disk while they wait.
    fn held(&self) -> (u64, u64) {
        match self {
            Job::Append(encoded) => encoded
                .iter()
                .map(Encoded::held)
                .fold((0, 0), |(m, d), (em, ed)| (m + em, d + ed)),
            Job::Finish => (0, 0),
        }
    }
}

/// What the jobs handed to the writing thread and not yet taken by it hold: memory (records
/// kept in their chunk's buffers) and disk (records moved out, see `spill`). A job waits to be
/// handed over while those would pass `MAX_WAITING`, unless none waits, which is the one job
/// the writer's queue held before: bounded by bytes, not by jobs, small jobs queue up behind a
/// big one. The writer's copies of a chunk of big records (20 to 40 MB of 4 MB direct writes)
/// made the caller wait, so that no next chunk was started and the encoding threads ran dry
/// (40 to 200 ms a build of the files corpus on two cores, in 2 to 9 waits).
pub(super) struct Backlog {
    /// Bytes waiting in memory and on disk, jobs waiting, and whether the thread has stopped.
    state: Mutex<(u64, u64, usize, bool)>,
    taken: Condvar,
}

/// The most the waiting jobs hold: in memory, about four chunks' records (see `CHUNK_BYTES` in
/// `sets/inputs.py`); on disk, a round of a chunk's big files (see `tasks::CHUNK_FILES`). While
/// the writing thread copies out a chunk of big files (40 MB took it 22 ms), the chunks of small
/// files encoded meanwhile (0.2 to 6 MB of records each) wait here: with room for 8 MB and 3
/// jobs, the caller stopped after three of them, started no next chunk, and both encoding
/// threads waited (15 to 20 ms of a 0.4 s build of the files corpus on two cores). Peak RSS
/// grew by 0 to 10 MB.
const MAX_WAITING: (u64, u64) = (16 << 20, 512 << 20);
/// And at most this many jobs: jobs of small records (deflated well) would otherwise queue by
/// the hundred within those bytes, and a build whose pusher waits for the appliance (`run`)
/// would run that far ahead of it.
const MAX_JOBS: usize = 8;

impl Backlog {
    pub(super) fn new() -> Self {
        Backlog {
            state: Mutex::new((0, 0, 0, false)),
            taken: Condvar::new(),
        }
    }

    /// Waits until `job` may be handed over, and counts it.
    pub(super) fn admit(&self, job: &Job) {
        let (memory, disk) = job.held();
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut state = self
            .taken
            .wait_while(state, |(m, d, jobs, stopped)| {
                !*stopped
                    && *jobs > 0
                    && (*jobs >= MAX_JOBS
                        || *m + memory > MAX_WAITING.0
                        || *d + disk > MAX_WAITING.1)
            })
            .unwrap_or_else(|e| e.into_inner());
        state.0 += memory;
        state.1 += disk;
        state.2 += 1;
    }

    /// The writing thread took a job that held `held`.
    fn take(&self, held: (u64, u64)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 -= held.0;
        state.1 -= held.1;
        state.2 -= 1;
        self.taken.notify_all();
    }

    /// The thread has stopped: nothing more will be taken, no one must wait for it.
    fn stop(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).3 = true;
        self.taken.notify_all();
    }
}

/// The file-writing thread: appends batches in order and answers each job with the files it
/// finished, or with the error that stopped it. Ends when told to finish, at the first error, or
/// when the writer is dropped (its unfinished file is then removed).
pub(super) fn write_files(
    mut files: Files,
    jobs: Receiver<Job>,
    done: Sender<Result<Vec<ManifestEntry>>>,
    backlog: &Backlog,
) {
    // Stopped however the thread ends, a panic included: else a caller waiting to hand a job
    // over would wait forever.
    struct StopOnEnd<'a>(&'a Backlog);
    impl Drop for StopOnEnd<'_> {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let _stop = StopOnEnd(backlog);
    for job in jobs {
        #[cfg(test)]
        tests::panic_if_asked();
        backlog.take(job.held());
        let (result, last) = match job {
            Job::Append(encoded) => (files.append(encoded), false),
            Job::Finish => (files.finish(), true),
        };
        let failed = result.is_err();
        if done.send(result).is_err() || failed || last {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    thread_local! {
        /// Set on a writing thread that is to panic as a job comes to it.
        static PANIC_ON_JOB: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn panic_if_asked() {
        assert!(!PANIC_ON_JOB.get(), "a panic the test asked for");
    }

    /// A job holding `mb` MB of encoded records in memory.
    fn job_of(mb: usize) -> Job {
        let mut records = Encoded::with_capacity(0);
        records.buf.resize(mb << 20, b' ');
        Job::Append(vec![records])
    }

    /// Admits `job` on a thread of its own; the receiver hears once it is admitted.
    fn admit_aside(backlog: &Arc<Backlog>, job: Job) -> std::sync::mpsc::Receiver<()> {
        let (admitted, heard) = channel();
        let backlog = Arc::clone(backlog);
        std::thread::spawn(move || {
            backlog.admit(&job);
            let _ = admitted.send(());
        });
        heard
    }

    #[test]
    fn chunks_encoded_while_a_chunk_of_big_files_is_written_wait_without_stopping_the_caller() {
        let backlog = Arc::new(Backlog::new());
        // The writing thread is busy with a chunk of big files (its records on disk, a few
        // small ones in memory): seven chunks of small files, 2 MB of records each, are handed
        // over meanwhile without the caller waiting, so that it goes on starting chunks.
        backlog.admit(&job_of(1));
        for chunk in 0..MAX_JOBS - 1 {
            let admitted = admit_aside(&backlog, job_of(2));
            let waited = admitted.recv_timeout(Duration::from_secs(10));
            assert_eq!(waited, Ok(()), "chunk {chunk} was taken without waiting");
        }
        // The next waits for the writing thread to take a job: memory stays bounded.
        let admitted = admit_aside(&backlog, job_of(1));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            admitted.try_recv().is_err(),
            "the caller waits on the full queue"
        );
        backlog.take(job_of(1).held());
        let waited = admitted.recv_timeout(Duration::from_secs(10));
        assert_eq!(waited, Ok(()), "the caller went on once a job was taken");
    }

    #[test]
    fn a_panic_of_the_writing_thread_releases_callers_waiting_on_its_queue() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files {
            set: SetKind::Feed,
            dir: dir.path().to_owned(),
            datasource: "docs".into(),
            feedtype: FeedType::Incremental,
            max_bytes: 1 << 20,
            max_records: 0,
            current: None,
            entries: Vec::new(),
            recycled: Arc::default(),
            blocks: None,
        };
        let backlog = Arc::new(Backlog::new());
        // The queue is full: the next caller waits for the thread to take a job.
        for _ in 0..MAX_JOBS {
            backlog.admit(&Job::Finish);
        }
        let (jobs, job_queue) = channel();
        let (done, _answers) = channel();
        let written = Arc::clone(&backlog);
        let thread = std::thread::spawn(move || {
            PANIC_ON_JOB.set(true);
            write_files(files, job_queue, done, &written);
        });
        let (released, admitted) = channel();
        let waiting = Arc::clone(&backlog);
        std::thread::spawn(move || {
            waiting.admit(&Job::Finish);
            let _ = released.send(());
        });
        // Time for the caller to block on the full queue: released after the panic, not
        // turned back by a queue already stopped.
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            admitted.try_recv().is_err(),
            "the caller waits on the full queue"
        );
        jobs.send(Job::Finish).unwrap();
        assert!(thread.join().is_err(), "the writing thread panicked");
        // A timeout, so that a caller left waiting fails the test rather than hangs it.
        let admitted = admitted.recv_timeout(Duration::from_secs(10));
        assert_eq!(admitted, Ok(()), "the waiting caller was released");
    }

    /// A set is published on a file system that cannot sync a directory (review: every build
    /// into one failed, `Invalid argument`), and not on a disk that fails to.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_a_failing_disk_stops_a_directory_sync() {
        let error = std::io::Error::from_raw_os_error;
        assert!(cannot_sync_dirs(&error(libc::EINVAL)));
        assert!(cannot_sync_dirs(&error(libc::ENOTSUP)));
        assert!(!cannot_sync_dirs(&error(libc::EIO)));
        assert!(!cannot_sync_dirs(&error(libc::ENOSPC)));
    }
}
