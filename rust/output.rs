//! Feed files written straight to the disk, past the page cache.
//!
//! Every feed file is synced before it is published, so its bytes must reach the disk before
//! the build is done anyway. Written through the page cache, they are first copied into it by
//! the kernel (a sixth of a build's CPU on a 2-core machine), then wait there until the sync,
//! which stalls the build. Written with `O_DIRECT`, they go from this buffer to the disk while
//! the next records are encoded. Where the file system refuses `O_DIRECT` (tmpfs, some network
//! file systems), files are written through the page cache as usual.
//!
//! A file is written a block at a time by a thread of its own, while the next block is filled
//! with the records that follow: written by the thread that copies records in, each block's
//! write (2 ms for 4 MB at this machine's 2 GB/s) stopped the copying, which bounded writing
//! 1 KB records near 1.2 million a second (1.35 million with the two blocks; blocks of 2 MB
//! took as long a byte to write, and gained nothing).
//!
//! What is copied into a block is hashed (XXH3-128, the manifest's digest) right behind the
//! copy, while it is in the cache: hashed once the block is full, it would be read back from
//! memory rather than from the cache the copy left it in.

use std::fs::File;
use std::io;
#[cfg(not(unix))]
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use xxhash_rust::xxh3::Xxh3Default;

/// `O_DIRECT` needs buffers, lengths and offsets aligned to the device's block size; 4 KiB
/// covers the devices in use.
const ALIGN: usize = 4096;
/// Bytes per write: large, to keep the number of direct writes small.
const BLOCK: usize = 4 << 20;
/// The size of a huge page, to which blocks are aligned.
const HUGE: usize = 2 << 20;
/// Bytes copied at a time, then hashed while they are in the cache.
const COPIED: usize = 64 << 10;

/// Aligned storage for one block.
struct Block {
    storage: Vec<u8>,
    start: usize,
}

impl Block {
    fn new() -> Self {
        // Only the aligned block is ever touched, and so resident: not the room to align it.
        let mut storage = vec![0; BLOCK + HUGE];
        let start = storage.as_ptr().align_offset(HUGE);
        ask_huge_pages(&mut storage[start..start + BLOCK]);
        Block { storage, start }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + BLOCK]
    }
}

/// A file's two blocks (one filled while the other is written), kept from one file to the next:
/// fresh, their pages are faulted in and zeroed by the kernel for every file.
pub struct Blocks([Block; 2]);

impl Default for Blocks {
    fn default() -> Self {
        Blocks([Block::new(), Block::new()])
    }
}

/// The thread that writes a file's full blocks, one at a time.
struct Writes {
    /// The block that is not being filled, when it is not being written.
    idle: Option<Block>,
    to: Option<Sender<(Block, u64)>>,
    back: Receiver<(Block, io::Result<()>)>,
    thread: Option<JoinHandle<()>>,
}

impl Writes {
    fn start(file: Arc<File>, direct: Arc<AtomicBool>, idle: Block) -> io::Result<Self> {
        let (to, blocks) = channel::<(Block, u64)>();
        let (written, back) = channel();
        let thread = std::thread::Builder::new()
            .name("fastfeed-disk".into())
            .spawn(move || {
                for (mut block, offset) in blocks {
                    let result = write_block(&file, &direct, block.bytes(), offset);
                    if written.send((block, result)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Writes {
            idle: Some(idle),
            to: Some(to),
            back,
            thread: Some(thread),
        })
    }

    /// The block not being filled, once its write (if any) is done; the write's error if it
    /// failed.
    fn take_idle(&mut self) -> io::Result<Block> {
        if let Some(block) = self.idle.take() {
            return Ok(block);
        }
        let (block, written) = self
            .back
            .recv()
            .map_err(|_| io::Error::other("the thread writing the file stopped"))?;
        if written.is_err() {
            // The thread ends once it has no more to write: a later call, instead of waiting
            // for a block that never comes back, finds it stopped.
            self.to = None;
        }
        written.map(|()| block)
    }

    /// Starts writing a full block at `offset`.
    fn write(&mut self, block: Block, offset: u64) -> io::Result<()> {
        self.to
            .as_ref()
            .and_then(|to| to.send((block, offset)).ok())
            .ok_or_else(|| io::Error::other("the thread writing the file stopped"))
    }
}

impl Drop for Writes {
    /// Waits for the write in flight: nothing writes the file once it is dropped.
    fn drop(&mut self) {
        self.to = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub struct Output {
    file: Arc<File>,
    /// Whether the file is written past the page cache (cleared if the file system refuses).
    direct: Arc<AtomicBool>,
    /// The block being filled.
    block: Block,
    /// Bytes of the block filled (and hashed).
    filled: usize,
    /// Bytes handed to be written so far: where the block goes in the file.
    written: u64,
    /// What was written so far.
    hash: Xxh3Default,
    writes: Writes,
}

impl Output {
    /// Creates (or truncates) the file at `path`, to be written through `blocks`.
    pub fn create(path: &Path, Blocks([block, idle]): Blocks) -> io::Result<Self> {
        let (file, direct) = match open_direct(path)? {
            Some(file) => (file, true),
            None => (File::create(path)?, false),
        };
        let (file, direct) = (Arc::new(file), Arc::new(AtomicBool::new(direct)));
        let writes = Writes::start(Arc::clone(&file), Arc::clone(&direct), idle)?;
        Ok(Output {
            file,
            direct,
            block,
            filled: 0,
            written: 0,
            hash: Xxh3Default::new(),
            writes,
        })
    }

    pub fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = (BLOCK - self.filled).min(data.len()).min(COPIED);
            let at = self.filled;
            let copied = &mut self.block.bytes()[at..at + n];
            copied.copy_from_slice(&data[..n]);
            self.hash.update(copied);
            self.filled += n;
            data = &data[n..];
            if self.filled == BLOCK {
                self.hand_over()?;
            }
        }
        Ok(())
    }

    /// Hands the full block to the writing thread, and goes on in the other once it is
    /// written.
    fn hand_over(&mut self) -> io::Result<()> {
        let next = self.writes.take_idle()?;
        let full = std::mem::replace(&mut self.block, next);
        self.writes.write(full, self.written)?;
        self.written += BLOCK as u64;
        self.filled = 0;
        Ok(())
    }

    /// Writes the first `len` bytes of the block (past `filled`, padding, not hashed) at its
    /// place in the file, on this thread: the file's last block, once the one before is written.
    fn write_now(&mut self, len: usize) -> io::Result<()> {
        let at = self.written;
        write_block(&self.file, &self.direct, &self.block.bytes()[..len], at)?;
        self.written += len as u64;
        self.filled = 0;
        Ok(())
    }

    /// Writes what is buffered and syncs the file to the disk; returns the file's hash, and
    /// the blocks for the next file.
    pub fn finish(mut self) -> io::Result<(u128, Blocks)> {
        let idle = self.writes.take_idle()?;
        if self.filled > 0 {
            let len = self.filled;
            if self.direct.load(Ordering::Relaxed) {
                // A direct write is whole blocks: pad the tail, then cut the file back.
                let padded = len.next_multiple_of(ALIGN);
                self.block.bytes()[len..padded].fill(0);
                self.write_now(padded)?;
                self.written -= (padded - len) as u64;
                self.file.set_len(self.written)?;
            } else {
                self.write_now(len)?;
            }
        }
        self.file.sync_all()?;
        Ok((self.hash.digest128(), Blocks([self.block, idle])))
    }
}

/// Writes `data` (a multiple of `ALIGN` unless it is the file's last) at `offset`: written
/// again after a refused direct write, it replaces whatever part of it went through.
fn write_block(file: &File, direct: &AtomicBool, data: &[u8], offset: u64) -> io::Result<()> {
    match write_at(file, data, offset) {
        // Opened direct, yet the file system refuses direct writes: write as usual.
        Err(e) if direct.load(Ordering::Relaxed) && e.kind() == io::ErrorKind::InvalidInput => {
            direct.store(false, Ordering::Relaxed);
            clear_direct(file)?;
            write_at(file, data, offset)
        }
        other => other,
    }
}

#[cfg(unix)]
fn write_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, offset)
}

/// Elsewhere files are never direct, and every write follows the one before.
#[cfg(not(unix))]
fn write_at(mut file: &File, data: &[u8], _offset: u64) -> io::Result<()> {
    file.write_all(data)
}

/// Asks for the block in huge pages, where the kernel has them to give: faulting it in page by
/// page, for every file, competed with the encoding threads' own page faults (two cores: 0.27
/// to 0.31 s a build instead of 0.30 to 0.34 s).
#[cfg(target_os = "linux")]
fn ask_huge_pages(block: &mut [u8]) {
    // SAFETY: the range is this block's memory, not yet touched; the advice is only a hint.
    unsafe {
        libc::madvise(block.as_mut_ptr().cast(), block.len(), libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn ask_huge_pages(_: &mut [u8]) {}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    match opened {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(target_os = "linux")]
fn clear_direct(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: plain fcntl calls on a descriptor this file owns.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_: &Path) -> io::Result<Option<File>> {
    Ok(None)
}

#[cfg(not(target_os = "linux"))]
fn clear_direct(_: &File) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `data` in uneven pieces, big ones and ones of a record's size, through one
    /// block kept from file to file, and reads each file back; checks the hash of what was
    /// written.
    fn round_trip(dir: &Path, data: &[u8]) -> (Vec<u8>, bool) {
        let path = dir.join("out.xml");
        let (mut blocks, mut read, mut direct) = (Blocks::default(), Vec::new(), false);
        for piece_len in [1_000_003, 1_237] {
            let mut out = Output::create(&path, blocks).unwrap();
            direct = out.direct.load(Ordering::Relaxed);
            for piece in data.chunks(piece_len) {
                out.write_all(piece).unwrap();
            }
            let hash;
            (hash, blocks) = out.finish().unwrap();
            read = std::fs::read(&path).unwrap();
            assert_eq!(hash, xxhash_rust::xxh3::xxh3_128(&read));
        }
        (read, direct)
    }

    #[test]
    fn files_hold_exactly_what_was_written_direct_or_not() {
        let data: Vec<u8> = (0..BLOCK * 2 + 12_345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        // The project's directory is on a disk; /dev/shm, where there is one, is tmpfs.
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let mut dirs = vec![disk];
        if Path::new("/dev/shm").is_dir() {
            dirs.push(tempfile::tempdir_in("/dev/shm").unwrap());
        }
        for dir in &dirs {
            for len in [0, 1, ALIGN, ALIGN + 1, BLOCK, data.len()] {
                let (read, direct) = round_trip(dir.path(), &data[..len]);
                assert_eq!(read, &data[..len], "{} bytes, direct {direct}", len);
            }
        }
    }

    /// Some file systems open a file for direct writes and then refuse them (EINVAL); the
    /// kernel does the same with a write that is not whole blocks, which makes the refusal
    /// real here. The block must go through the page cache instead, and the blocks after it.
    #[test]
    fn a_refused_direct_write_goes_through_the_page_cache() {
        let data: Vec<u8> = (0..BLOCK + 5_000).map(|i| (i * 13 % 241) as u8).collect();
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = disk.path().join("out.xml");
        let mut out = Output::create(&path, Blocks::default()).unwrap();
        assert!(
            out.direct.load(Ordering::Relaxed),
            "the project's directory is on a disk, which takes direct writes"
        );
        out.write_all(&data[..100]).unwrap();
        out.write_now(100).unwrap();
        assert!(!out.direct.load(Ordering::Relaxed));
        out.write_all(&data[100..]).unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
