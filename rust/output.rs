//! Feed files written straight to the disk, past the page cache.
//!
//! Every feed file is synced before it is published, so its bytes must reach the disk before
//! the build is done anyway. Written through the page cache, they are first copied into it by
//! the kernel (a sixth of a build's CPU on a 2-core machine), then wait there until the sync,
//! which stalls the build. Written with `O_DIRECT`, they go from this buffer to the disk while
//! the next records are encoded. Where the file system refuses `O_DIRECT` (tmpfs, some network
//! file systems), files are written through the page cache as usual.
//!
//! What is copied into the block is hashed (BLAKE3, the manifest's digest) right behind the
//! copy, a whole number of `HASHED` bytes at a time: hashed a record at a time, BLAKE3 has no
//! chunks to hash side by side and runs at a fifteenth of its speed; hashed once the block is
//! full, it reads the 4 MB back from memory rather than from the cache the copy left them in.

use std::fs::File;
use std::io;
#[cfg(not(unix))]
use std::io::Write;
use std::path::Path;

/// `O_DIRECT` needs buffers, lengths and offsets aligned to the device's block size; 4 KiB
/// covers the devices in use.
const ALIGN: usize = 4096;
/// Bytes per write: large, to keep the number of (blocking) direct writes small.
const BLOCK: usize = 4 << 20;
/// The size of a huge page, to which the block is aligned.
const HUGE: usize = 2 << 20;
/// Bytes copied at a time, then hashed while they are in the cache; the hash takes them a
/// multiple of 16 KB at a time, which BLAKE3 hashes 16 chunks side by side (AVX-512) from the
/// block's start (the file's offsets are multiples of the block's size).
const COPIED: usize = 64 << 10;
const HASHED: usize = 16 << 10;

/// Aligned storage for one block, kept from one file to the next: fresh, its pages are faulted
/// in and zeroed by the kernel for every file.
pub struct Block {
    storage: Vec<u8>,
    start: usize,
}

impl Block {
    pub fn new() -> Self {
        let mut storage = vec![0; BLOCK + HUGE];
        let start = storage.as_ptr().align_offset(HUGE);
        ask_huge_pages(&mut storage[start..start + BLOCK]);
        Block { storage, start }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + BLOCK]
    }
}

impl Default for Block {
    fn default() -> Self {
        Self::new()
    }
}

pub struct Output {
    file: File,
    direct: bool,
    block: Block,
    /// Bytes of the block filled, and hashed.
    filled: usize,
    hashed: usize,
    /// Bytes written to the file so far.
    written: u64,
    /// What was written so far.
    hash: blake3::Hasher,
}

impl Output {
    /// Creates (or truncates) the file at `path`, to be written through `block`.
    pub fn create(path: &Path, block: Block) -> io::Result<Self> {
        let (file, direct) = match open_direct(path)? {
            Some(file) => (file, true),
            None => (File::create(path)?, false),
        };
        Ok(Output {
            file,
            direct,
            block,
            filled: 0,
            hashed: 0,
            written: 0,
            hash: blake3::Hasher::new(),
        })
    }

    pub fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = (BLOCK - self.filled).min(data.len()).min(COPIED);
            let at = self.filled;
            self.block.bytes()[at..at + n].copy_from_slice(&data[..n]);
            self.filled += n;
            data = &data[n..];
            if self.filled == BLOCK {
                self.write_block(BLOCK)?;
            } else {
                self.hash_to(self.filled / HASHED * HASHED);
            }
        }
        Ok(())
    }

    /// Hashes the block's bytes from `hashed` to `end`.
    fn hash_to(&mut self, end: usize) {
        if end > self.hashed {
            let from = self.hashed;
            self.hash.update(&self.block.bytes()[from..end]);
            self.hashed = end;
        }
    }

    /// Writes the first `len` bytes of the block (a multiple of `ALIGN` unless it is the last;
    /// past `filled`, padding, not hashed) at its place in the file: written again after a
    /// refused direct write, the block replaces whatever part of it went through.
    fn write_block(&mut self, len: usize) -> io::Result<()> {
        self.hash_to(self.filled.min(len));
        let block = &self.block.bytes()[..len];
        let result = match write_at(&self.file, block, self.written) {
            // Opened direct, yet the file system refuses direct writes: write as usual.
            Err(e) if self.direct && e.kind() == io::ErrorKind::InvalidInput => {
                self.direct = false;
                clear_direct(&self.file)?;
                write_at(&self.file, block, self.written)
            }
            other => other,
        };
        result?;
        self.written += len as u64;
        self.filled = 0;
        self.hashed = 0;
        Ok(())
    }

    /// Writes what is buffered and syncs the file to the disk; returns the file's hash, and
    /// the block for the next file.
    pub fn finish(mut self) -> io::Result<(blake3::Hash, Block)> {
        if self.filled > 0 {
            let len = self.filled;
            if self.direct {
                // A direct write is whole blocks: pad the tail, then cut the file back.
                let padded = len.next_multiple_of(ALIGN);
                self.block.bytes()[len..padded].fill(0);
                self.write_block(padded)?;
                self.written -= (padded - len) as u64;
                self.file.set_len(self.written)?;
            } else {
                self.write_block(len)?;
            }
        }
        self.file.sync_all()?;
        Ok((self.hash.finalize(), self.block))
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
        let (mut block, mut read, mut direct) = (Block::new(), Vec::new(), false);
        for piece_len in [1_000_003, 1_237] {
            let mut out = Output::create(&path, block).unwrap();
            direct = out.direct;
            for piece in data.chunks(piece_len) {
                out.write_all(piece).unwrap();
            }
            let hash;
            (hash, block) = out.finish().unwrap();
            read = std::fs::read(&path).unwrap();
            assert_eq!(hash, blake3::hash(&read));
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
        let mut out = Output::create(&path, Block::new()).unwrap();
        assert!(
            out.direct,
            "the project's directory is on a disk, which takes direct writes"
        );
        out.write_all(&data[..100]).unwrap();
        out.write_block(100).unwrap();
        assert!(!out.direct);
        out.write_all(&data[100..]).unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
