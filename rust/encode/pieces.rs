//! A content of more than a block deflated in pieces, one block (`IN_BLOCK`) each, which an
//! encoding thread left idle deflates beside the thread that writes the record: a 30 MB file
//! was one record, deflated on one thread for 50 ms while the other finished its batch and
//! waited.
//!
//! Each piece is deflated on its own, from an empty history, and all but the last end in a
//! sync flush (an empty stored block, aligned to a byte): end to end, behind a zlib header and
//! before the Adler-32 of the whole (combined from the pieces'), they are one zlib stream,
//! which any inflater decodes. The bytes depend on the content alone, not on which thread
//! deflated which piece: the same content gives the same feed on one core or two.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::{Deflater, Stream, IN_BLOCK};
use crate::error::{Error, Result};

/// Whether a content of `len` bytes is deflated in pieces: when it has more than one block.
pub(crate) fn split(len: u64) -> bool {
    len > IN_BLOCK as u64
}

/// Pieces read but not yet written, at most: each holds its block, then its deflated bytes,
/// until the pieces before it are written. Enough for two threads to deflate while the next
/// block is read.
const AHEAD: usize = 2;

/// The zlib header ISA-L writes for a whole content (deflate, 32 KB window, no dictionary, its
/// level hint), so that every content starts alike.
const ZLIB_HEADER: [u8; 2] = [0x78, 0x5E];

/// Room for a piece's block, or for its deflated bytes (see `Stream::piece`): the two share
/// buffers.
const BUFFER: usize = IN_BLOCK + IN_BLOCK / 16 + 64;

struct Piece {
    at: usize,
    block: Vec<u8>,
    last: bool,
}

struct Deflated {
    at: usize,
    bytes: Vec<u8>,
    /// The Adler-32 of the piece's block, and its length.
    adler: u32,
    len: u64,
    #[cfg(test)]
    on: std::thread::ThreadId,
}

#[derive(Default)]
struct Queue {
    /// Pieces read and not yet taken, in order.
    waiting: VecDeque<Piece>,
    /// Pieces deflated and not yet written, in any order.
    done: Vec<Deflated>,
    /// Buffers given back, for the next pieces.
    spare: Vec<Vec<u8>>,
    /// Whether a helper is asked for or at work: one at a time is enough on two threads, and
    /// another is asked only once it found nothing left to take.
    helping: bool,
    /// A helper panicked (a bug): the content cannot be whole.
    failed: bool,
    /// The content is written or given up: what is left is dropped, not deflated.
    closed: bool,
}

struct Shared {
    /// ISA-L's level, the writing thread's.
    level: u32,
    queue: Mutex<Queue>,
    /// Told when a piece is deflated.
    deflated: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

thread_local! {
    /// The stream a thread deflates other threads' pieces with: not its own record's, which it
    /// may be in the middle of.
    static HELPER: RefCell<Option<Stream>> = const { RefCell::new(None) };
}

/// A content being deflated in pieces, given block by block (`push`), written in order by the
/// thread that gives them.
pub(crate) struct Pieces<'d> {
    shared: Arc<Shared>,
    stream: &'d mut Stream,
    /// Whether other threads of the pool may be asked to help: none on one thread, nor off
    /// the pool.
    helpers: bool,
    /// Pieces read, and written.
    read: usize,
    written: usize,
    /// The Adler-32 of the bytes of the pieces written.
    adler: u32,
    /// The pieces this thread leaves to helpers, waiting for one to deflate them: a test
    /// makes a helper take pieces, which timing alone may never do.
    #[cfg(test)]
    leaves: fn(usize) -> bool,
    /// The thread that deflated each piece written, in order.
    #[cfg(test)]
    deflated_on: Vec<std::thread::ThreadId>,
}

impl<'d> Pieces<'d> {
    /// Starts a content deflated with `deflater`'s level (its stream deflates the pieces this
    /// thread takes).
    pub(crate) fn new(deflater: &'d mut Deflater) -> Self {
        let stream = &mut deflater.stream;
        Pieces {
            shared: Arc::new(Shared {
                level: stream.level,
                queue: Mutex::default(),
                deflated: Condvar::new(),
            }),
            stream,
            helpers: rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1,
            read: 0,
            written: 0,
            adler: 1,
            #[cfg(test)]
            leaves: |_| false,
            #[cfg(test)]
            deflated_on: Vec::new(),
        }
    }

    /// Takes the content's next block (`IN_BLOCK` bytes, or fewer for the `last`), and hands
    /// the deflated bytes to `write` as they come, in order.
    pub(crate) fn push(
        &mut self,
        block: &[u8],
        last: bool,
        write: &mut impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        debug_assert!(block.len() <= IN_BLOCK);
        if self.read == 0 {
            write(&ZLIB_HEADER)?;
        }
        let mut queue = self.shared.lock();
        let mut buffer = queue.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer.reserve(BUFFER);
        buffer.extend_from_slice(block);
        queue.waiting.push_back(Piece {
            at: self.read,
            block: buffer,
            last,
        });
        self.read += 1;
        if self.helpers && !queue.helping {
            queue.helping = true;
            let shared = Arc::clone(&self.shared);
            rayon::spawn(move || help(&shared));
        }
        drop(queue);
        while self.read - self.written >= AHEAD {
            self.step(write)?;
        }
        Ok(())
    }

    /// Writes the pieces left and the stream's end; all the blocks were given.
    pub(crate) fn finish(mut self, write: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        while self.written < self.read {
            self.step(write)?;
        }
        write(&self.adler.to_be_bytes())
    }

    /// Writes the next piece if it is deflated, else deflates the first piece no thread has
    /// taken, else waits for a helper to deflate one.
    fn step(&mut self, write: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let mut queue = self.shared.lock();
        loop {
            if queue.failed {
                return Err(Error::Config(
                    "an encoding thread failed (a bug in fastfeed: please report it)".into(),
                ));
            }
            if let Some(i) = queue.done.iter().position(|d| d.at == self.written) {
                let Deflated {
                    mut bytes,
                    adler,
                    len,
                    #[cfg(test)]
                    on,
                    ..
                } = queue.done.swap_remove(i);
                drop(queue);
                #[cfg(test)]
                self.deflated_on.push(on);
                write(&bytes)?;
                self.adler = adler32_combine(self.adler, adler, len);
                self.written += 1;
                bytes.clear();
                self.shared.lock().spare.push(bytes);
                return Ok(());
            }
            if queue.waiting.front().is_some_and(|piece| self.takes(piece)) {
                let piece = queue.waiting.pop_front().expect("a piece waits");
                let spare = queue.spare.pop().unwrap_or_default();
                drop(queue);
                let deflated = deflate(self.stream, piece, spare, &self.shared);
                self.shared.lock().done.push(deflated);
                return Ok(());
            }
            queue = self
                .shared
                .deflated
                .wait(queue)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Whether this thread deflates `piece` itself when it finds it waiting: always, but in
    /// a test that leaves it to a helper.
    #[cfg(not(test))]
    fn takes(&self, _piece: &Piece) -> bool {
        true
    }

    #[cfg(test)]
    fn takes(&self, piece: &Piece) -> bool {
        !(self.leaves)(piece.at)
    }
}

impl Drop for Pieces<'_> {
    /// Whatever became of the content, a helper left at work drops what it finds.
    fn drop(&mut self) {
        let mut queue = self.shared.lock();
        queue.closed = true;
        queue.waiting.clear();
        queue.spare.clear();
        queue.done.clear();
    }
}

/// Deflates `piece` into `out` (cleared first) with `stream`; its block's buffer is given back
/// to `shared`.
fn deflate(stream: &mut Stream, piece: Piece, mut out: Vec<u8>, shared: &Shared) -> Deflated {
    out.clear();
    stream.piece(&piece.block, piece.last, &mut out);
    let adler = adler32(&piece.block);
    let len = piece.block.len() as u64;
    let mut block = piece.block;
    block.clear();
    shared.lock().spare.push(block);
    Deflated {
        at: piece.at,
        bytes: out,
        adler,
        len,
        #[cfg(test)]
        on: std::thread::current().id(),
    }
}

/// A helper's work on another thread of the pool: takes the first piece no thread has taken
/// until there is none.
fn help(shared: &Shared) {
    loop {
        let mut queue = shared.lock();
        let piece = match queue.waiting.pop_front() {
            Some(piece) if !queue.closed => piece,
            _ => {
                queue.helping = false;
                return;
            }
        };
        let spare = queue.spare.pop().unwrap_or_default();
        drop(queue);
        let deflated = catch_unwind(AssertUnwindSafe(|| {
            HELPER.with(|helper| {
                let mut helper = helper.borrow_mut();
                if helper.as_ref().is_none_or(|s| s.level != shared.level) {
                    *helper = Some(Stream::new(shared.level));
                }
                let stream = helper.as_mut().expect("just made");
                deflate(stream, piece, spare, shared)
            })
        }));
        let mut queue = shared.lock();
        match deflated {
            Ok(deflated) if !queue.closed => queue.done.push(deflated),
            Ok(_) => {}
            Err(_) => queue.failed = true,
        }
        drop(queue);
        shared.deflated.notify_one();
    }
}

/// The Adler-32 of `bytes` (ISA-L's, vectorised).
fn adler32(bytes: &[u8]) -> u32 {
    // SAFETY: ISA-L reads `len` bytes from the pointer.
    unsafe { isal_sys::igzip_lib::isal_adler32(1, bytes.as_ptr(), bytes.len() as u64) }
}

/// The Adler-32 of two byte strings end to end, from each one's and the second's length
/// (zlib's `adler32_combine`).
fn adler32_combine(first: u32, second: u32, second_len: u64) -> u32 {
    const BASE: u64 = 65521;
    let rem = second_len % BASE;
    let (a1, b1) = (u64::from(first & 0xffff), u64::from(first >> 16));
    let (a2, b2) = (u64::from(second & 0xffff), u64::from(second >> 16));
    let a = (a1 + a2 + BASE - 1) % BASE;
    let b = (rem * a1 + b1 + b2 + BASE - rem) % BASE;
    (a | (b << 16)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// `data` deflated in pieces by one thread, as the writing thread does when no other helps.
    fn in_pieces(data: &[u8], level: u8) -> Vec<u8> {
        let mut deflater = Deflater::new(level);
        let mut pieces = Pieces::new(&mut deflater);
        let mut out = Vec::new();
        let mut write = |bytes: &[u8]| {
            out.extend_from_slice(bytes);
            Ok(())
        };
        for (block, last) in super::super::blocks(data) {
            pieces.push(block, last, &mut write).unwrap();
        }
        pieces.finish(&mut write).unwrap();
        out
    }

    fn inflate(deflated: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(deflated)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    fn content(len: usize) -> Vec<u8> {
        (0..len).map(|i| ((i % 251) ^ (i / 4096)) as u8).collect()
    }

    #[test]
    fn adler32_combined_is_adler32_of_the_whole() {
        let data = content(200_000);
        for cut in [0, 1, 65_520, 65_521, 65_522, 199_999, 200_000] {
            let (a, b) = data.split_at(cut);
            let combined = adler32_combine(adler32(a), adler32(b), b.len() as u64);
            assert_eq!(combined, adler32(&data), "cut at {cut}");
        }
        // zlib's value for a known string.
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn pieces_make_one_zlib_stream_at_every_boundary_and_level() {
        for len in [
            IN_BLOCK + 1,
            2 * IN_BLOCK,
            2 * IN_BLOCK - 1,
            2 * IN_BLOCK + 1,
            5 * IN_BLOCK + 12_345,
        ] {
            let data = content(len);
            for level in [1, 2, 6] {
                let deflated = in_pieces(&data, level);
                assert_eq!(inflate(&deflated), data, "{len} bytes at level {level}");
                assert!(deflated.len() < len / 4, "{len} bytes at level {level}");
            }
        }
        // A last piece of nothing at all is still a final block.
        let mut deflater = Deflater::new(1);
        let mut pieces = Pieces::new(&mut deflater);
        let mut out = Vec::new();
        let mut write = |bytes: &[u8]| {
            out.extend_from_slice(bytes);
            Ok(())
        };
        pieces.push(&content(IN_BLOCK), false, &mut write).unwrap();
        pieces.push(b"", true, &mut write).unwrap();
        pieces.finish(&mut write).unwrap();
        assert_eq!(inflate(&out), content(IN_BLOCK));
    }

    /// Text and noise, so that pieces deflate to lengths of their own, and each piece is
    /// unlike the others.
    fn mixed(len: usize) -> Vec<u8> {
        let mut state = 7u64;
        (0..len)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                if (i / 100_000) % 2 == 0 {
                    b"feed records "[i % 13]
                } else {
                    (state >> 56) as u8
                }
            })
            .collect()
    }

    #[test]
    fn the_bytes_are_the_same_whichever_threads_deflate_the_pieces() {
        let data = mixed(6 * IN_BLOCK + 777);
        let alone = in_pieces(&data, 1);
        assert_eq!(inflate(&alone), data);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for _ in 0..4 {
            let (a, b) = pool.join(|| in_pieces(&data, 1), || in_pieces(&data, 1));
            assert!(a == alone && b == alone);
        }
    }

    /// Whatever the timing, pieces a helper deflated on the other thread of the pool, with its
    /// own stream, land in their place among those the writing thread deflated: the writing
    /// thread leaves every other piece to helpers and waits for them.
    #[test]
    fn pieces_a_helper_deflates_land_in_their_place() {
        let data = mixed(7 * IN_BLOCK + 777);
        let alone = in_pieces(&data, 1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (out, deflated_on, writer) = pool.install(|| {
            let mut deflater = Deflater::new(1);
            let mut pieces = Pieces::new(&mut deflater);
            pieces.leaves = |at| at % 2 == 1;
            let mut out = Vec::new();
            let mut write = |bytes: &[u8]| {
                out.extend_from_slice(bytes);
                Ok(())
            };
            for (block, last) in super::super::blocks(&data) {
                pieces.push(block, last, &mut write).unwrap();
            }
            // As `finish` does, but the threads that deflated the pieces are read before.
            while pieces.written < pieces.read {
                pieces.step(&mut write).unwrap();
            }
            let deflated_on = std::mem::take(&mut pieces.deflated_on);
            pieces.finish(&mut write).unwrap();
            (out, deflated_on, std::thread::current().id())
        });
        assert_eq!(deflated_on.len(), 8);
        for (at, on) in deflated_on.iter().enumerate().filter(|(at, _)| at % 2 == 1) {
            assert_ne!(*on, writer, "piece {at} was deflated by the writing thread");
        }
        assert_eq!(inflate(&out), data);
        assert!(out == alone, "the same bytes as one thread's");
    }
}
