//! Binary encodings of the protocol: `base64binary` and `base64compressed` (zlib, then base64).

use base64_simd::STANDARD;
use isal_sys::igzip_lib as isal;

use crate::record::OpenedFile;
use crate::spill::Spill;

pub(crate) mod pieces;

/// How content may be compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compress {
    /// Compress content that will shrink: binary, and text of 2 KB or more (shorter text is
    /// sent as text).
    Auto,
    /// Compress every content, text included.
    Always,
    /// Never compress: binary goes as plain base64.
    Never,
}

impl Compress {
    /// Whether binary content of `len` bytes goes deflated, `deflated` bytes long: when that is
    /// shorter, or always if asked.
    pub fn keeps(self, deflated: u64, len: u64) -> bool {
        deflated < len || self == Compress::Always
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Compress::Auto),
            "always" => Some(Compress::Always),
            "never" => Some(Compress::Never),
            _ => None,
        }
    }
}

/// The `encoding` attribute chosen for a content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Base64Binary,
    Base64Compressed,
}

impl Encoding {
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Base64Binary => "base64binary",
            Encoding::Base64Compressed => "base64compressed",
        }
    }
}

/// Appends standard base64 (with padding) of `data` to `out`, straight into its spare capacity:
/// zero-filling first would touch every page twice.
pub fn base64_into(out: &mut Vec<u8>, data: &[u8]) {
    let n = STANDARD.encoded_length(data.len());
    out.reserve(n);
    let written = STANDARD
        .encode(
            data,
            base64_simd::Out::from_uninit_slice(&mut out.spare_capacity_mut()[..n]),
        )
        .len();
    debug_assert_eq!(written, n);
    // SAFETY: `encode` initialised the first `written` bytes of the spare capacity.
    unsafe { out.set_len(out.len() + written) };
}

/// Base64 of data given in pieces, the same as of the whole: whole groups of three bytes are
/// encoded as they come, and the one or two bytes that end a piece wait for the next.
#[derive(Default)]
pub struct Base64Stream {
    held: [u8; 3],
    len: usize,
    total: u64,
}

impl Base64Stream {
    /// Appends the base64 of the next piece of data to `out`.
    pub fn push(&mut self, out: &mut Vec<u8>, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.len > 0 {
            let take = (3 - self.len).min(data.len());
            self.held[self.len..self.len + take].copy_from_slice(&data[..take]);
            self.len += take;
            data = &data[take..];
            if self.len < 3 {
                return;
            }
            base64_into(out, &self.held);
            self.len = 0;
        }
        let whole = data.len() / 3 * 3;
        base64_into(out, &data[..whole]);
        let rest = &data[whole..];
        self.held[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }

    /// Appends the end of the base64, padded, to `out`; returns the bytes of data given.
    pub fn finish(self, out: &mut Vec<u8>) -> u64 {
        base64_into(out, &self.held[..self.len]);
        self.total
    }
}

/// Decodes base64 given by a user into `out` (cleared first): standard alphabet, padding
/// optional, and line breaks or other ASCII whitespace ignored (encoders often wrap at 76).
pub fn decode_base64_into(text: &str, out: &mut Vec<u8>) -> Result<(), String> {
    // Most base64 has no whitespace: decode it as it is, and look for whitespace only when
    // that fails (a byte-by-byte scan first would cost more than the decoding).
    if decode_compact(text.as_bytes(), out).is_ok() {
        return Ok(());
    }
    if !text.bytes().any(|b| b.is_ascii_whitespace()) {
        return Err(base64_error(text.as_bytes()));
    }
    let compact: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    decode_compact(&compact, out).map_err(|()| base64_error(&compact))
}

/// Decodes base64 without whitespace, padded or not, into `out` (cleared first).
fn decode_compact(compact: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
    let engine = if compact.ends_with(b"=") {
        base64_simd::STANDARD
    } else {
        base64_simd::STANDARD_NO_PAD
    };
    out.clear();
    let n = engine.decoded_length(compact).map_err(|_| ())?;
    out.reserve(n);
    let done = engine
        .decode(
            compact,
            base64_simd::Out::from_uninit_slice(&mut out.spare_capacity_mut()[..n]),
        )
        .map_err(|_| ())?
        .len();
    // SAFETY: `decode` initialised the first `done` bytes of the spare capacity.
    unsafe { out.set_len(done) };
    Ok(())
}

/// Why `compact` (base64 without whitespace) does not decode.
fn base64_error(compact: &[u8]) -> String {
    let bad = compact
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='));
    match bad {
        Some(pos) => format!("not valid base64: unexpected character at offset {pos}"),
        None => format!(
            "not valid base64: {} characters cannot end a base64 text",
            compact.len()
        ),
    }
}

/// Formats that are already compressed: deflating them again costs time and saves nothing.
fn is_precompressed(data: &[u8]) -> bool {
    const MAGIC: &[&[u8]] = &[
        b"\x1f\x8b",           // gzip
        b"PK\x03\x04",         // zip, and the OOXML/ODF/JAR/EPUB formats built on it
        b"\x89PNG",            // png
        b"\xff\xd8\xff",       // jpeg
        b"GIF8",               // gif
        b"BZh",                // bzip2
        b"\xfd7zXZ\x00",       // xz
        b"7z\xbc\xaf\x27\x1c", // 7z
        b"\x28\xb5\x2f\xfd",   // zstd
        b"Rar!",               // rar
        b"OggS",               // ogg
        b"ID3",                // mp3
        b"\x1a\x45\xdf\xa3",   // matroska, webm
        b"wOFF",               // woff
        b"wOF2",               // woff2
    ];
    MAGIC.iter().any(|m| data.starts_with(m))
        || (data.len() > 12 && &data[4..8] == b"ftyp") // mp4, mov, heic
        || (data.len() > 12 && data.starts_with(b"RIFF") && &data[8..12] == b"WEBP")
}

/// Bytes from the start of a content whose entropy decides whether the whole is worth deflating.
const PROBE: usize = 16 * 1024;
/// Above this many bits per byte, data is noise to deflate (random, encrypted, compressed).
const INCOMPRESSIBLE_BITS: f64 = 7.8;

/// Shannon entropy of the byte histogram, in bits per byte (0 to 8). Counting is ~18x cheaper
/// than a trial deflate, which costs as much on noise as on anything else.
fn entropy(sample: &[u8]) -> f64 {
    // Four histograms break the store-to-load chain of equal neighbouring bytes.
    let mut counts = [[0u32; 256]; 4];
    let mut quads = sample.chunks_exact(4);
    for q in &mut quads {
        for (h, &b) in counts.iter_mut().zip(q) {
            h[usize::from(b)] += 1;
        }
    }
    for &b in quads.remainder() {
        counts[0][usize::from(b)] += 1;
    }
    let n = sample.len() as f64;
    (0..256)
        .map(|i| counts.iter().map(|h| h[i]).sum::<u32>())
        .filter(|&c| c > 0)
        .map(|c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}
/// Below this, compression headers and base64 rounding eat what compression saves.
const MIN_COMPRESS: usize = 128;

/// Input handed to ISA-L in one call, and the room given to its output in one call. Both shape
/// the bytes it writes (it ends deflate blocks where a call's input or output does): every
/// content is deflated in these same steps, whole in memory or read from a file in blocks, so
/// that the same content always gives the same feed.
pub const IN_BLOCK: usize = 1 << 20;
const OUT_BLOCK: usize = 256 << 10;

/// `data` in the blocks of `IN_BLOCK` bytes a content is deflated in, each with whether it is
/// the last; an empty content is one empty block.
pub fn blocks(data: &[u8]) -> impl Iterator<Item = (&[u8], bool)> {
    let last = data.len().saturating_sub(1) / IN_BLOCK;
    (0..=last).map(move |i| {
        let block = &data[i * IN_BLOCK..data.len().min((i + 1) * IN_BLOCK)];
        (block, i == last)
    })
}

/// ISA-L's state for one stream (82 KB), zeroed, where ISA-L's output depends on the input alone.
///
/// ISA-L's x86 deflate for levels 1 and 2 (`.write_first_byte` in igzip_icf_body_h1_gr_bt.asm)
/// files the third byte of a stream in its match table under the hash of a register that still
/// holds the state's address (its bits 16 to 47), not of the bytes: one slot of the table moved
/// with the address, and some contents deflated to other (valid) bytes from one thread or run to
/// the next. Each state is mapped at an address that hash sends to one fixed slot, where one
/// can be (see `in_slot`).
struct State {
    ptr: std::ptr::NonNull<isal::isal_zstream>,
    /// Mapped by `in_slot` (and so unmapped), else allocated.
    mapped: bool,
}

impl State {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn new() -> Self {
        Self::in_slot(PINNED_SLOT)
    }

    /// Elsewhere the state is allocated: other systems' mappings are not searched (x86 elsewhere
    /// may make other bytes; other CPUs run ISA-L's C or their own assembly, which has no such
    /// hash).
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    fn new() -> Self {
        Self::allocated()
    }

    /// A state allocated as any other block, wherever the allocator puts it.
    fn allocated() -> Self {
        let layout = std::alloc::Layout::new::<isal::isal_zstream>();
        // SAFETY: a layout that is not empty.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<isal::isal_zstream>();
        let Some(ptr) = std::ptr::NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: a zeroed block of its own.
        unsafe { Self::set_up(ptr, false) }
    }

    /// # Safety
    /// `ptr` is an isal_zstream's zeroed bytes, used by nothing else.
    unsafe fn set_up(ptr: std::ptr::NonNull<isal::isal_zstream>, mapped: bool) -> Self {
        // SAFETY: all zeros is a valid isal_zstream (numbers, arrays and null pointers), that
        // isal_deflate_init then sets up.
        unsafe { isal::isal_deflate_init(ptr.as_ptr()) };
        State { ptr, mapped }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        if self.mapped {
            // The mapping `in_slot` made, no longer used.
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            unmap(self.ptr.as_ptr().cast());
        } else {
            let layout = std::alloc::Layout::new::<isal::isal_zstream>();
            // SAFETY: the block `allocated` made with this layout, no longer used.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

/// The match-table slot every state's address hashes to.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const PINNED_SLOT: u32 = 0;

/// How far below the top of the main stack a state is mapped at the least. The kernel keeps a
/// gap there for the stack to grow into (the stack's limit, 128 MB at the least) and maps
/// blocks below it: with address randomization off, the first of them lies right below the
/// gap, and a state mapped above it would cut the stack short.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const STACK_BERTH: usize = 1 << 30;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl State {
    /// A state mapped where ISA-L's stray hash of its address is `slot` (see `mapped_below`).
    /// Where no address can be, the state is allocated rather than the build failing: its
    /// stream's output may then differ from other threads' for the same content (as valid).
    fn in_slot(slot: u32) -> Self {
        Self::in_slot_below(slot, highest_address())
    }

    /// `in_slot`, at `highest` or below (None: nothing can be mapped).
    fn in_slot_below(slot: u32, highest: Option<usize>) -> Self {
        match highest.and_then(|highest| mapped_below(slot, highest)) {
            // SAFETY: a new mapping, zeroed, of its own.
            Some(ptr) => unsafe { Self::set_up(ptr, true) },
            None => {
                // Said once a process: the feed stays valid, but a user comparing two builds'
                // bytes (or a sync's digests) must know why they may differ.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "fastfeed: warning: no address fits ISA-L's deflate state on this \
                         system; compressed contents stay valid, but the same input may give \
                         other bytes from one build to the next"
                    );
                });
                Self::allocated()
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn map(at: *mut libc::c_void, flags: libc::c_int) -> Option<*mut libc::c_void> {
    let len = std::mem::size_of::<isal::isal_zstream>();
    // SAFETY: a new private anonymous mapping, which replaces nothing (no MAP_FIXED).
    let got = unsafe { libc::mmap(at, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    (got != libc::MAP_FAILED).then_some(got)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn unmap(at: *mut libc::c_void) {
    // SAFETY: a mapping of a state's length made by `map`, not used since.
    unsafe { libc::munmap(at, std::mem::size_of::<isal::isal_zstream>()) };
}

/// The highest address a state may be mapped at: where the kernel maps such a block now
/// (above it, the gap kept for the main stack), and `STACK_BERTH` below the top of the main
/// stack, where the kernel put the program's random bytes (`AT_RANDOM`). None if nothing can
/// be mapped.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn highest_address() -> Option<usize> {
    let hint = map(
        std::ptr::null_mut(),
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )?;
    unmap(hint);
    // SAFETY: reads the process's auxiliary vector; 0 where it has no such entry.
    let stack = unsafe { libc::getauxval(libc::AT_RANDOM) } as usize;
    let below_stack = match stack {
        0 => usize::MAX,
        top => top.checked_sub(STACK_BERTH + std::mem::size_of::<isal::isal_zstream>())?,
    };
    Some((hint as usize).min(below_stack))
}

/// A new mapping where ISA-L's stray hash of its address is `slot`, at `highest` or below: one
/// address in every 2 GB window of address space fits (the hash is linear, and one-to-one on
/// the 15 low bits of the page number), tried from `highest` going down.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn mapped_below(slot: u32, highest: usize) -> Option<std::ptr::NonNull<isal::isal_zstream>> {
    use libc::{MAP_ANONYMOUS, MAP_FIXED_NOREPLACE, MAP_PRIVATE};
    static LOW_BITS: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    let low_bits = LOW_BITS.get_or_init(|| {
        let mut low_bits = vec![0; SLOTS as usize];
        for low in 0..SLOTS {
            low_bits[stray_slot(low) as usize] = low as u16;
        }
        low_bits
    });
    for window in (0..=(highest >> 16) / SLOTS as usize).rev() {
        let high = (window * SLOTS as usize) as u32;
        let low = low_bits[(slot ^ stray_slot(high)) as usize];
        let want = (high as usize + usize::from(low)) << 16;
        // Page 0 is no pointer.
        if want == 0 || want > highest {
            continue;
        }
        let Some(got) = map(
            want as *mut _,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
        ) else {
            // Taken: try the next window. Anything else (no memory, an address-space limit,
            // a sandbox refusing the flag) would fail at every window alike.
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                continue;
            }
            return None;
        };
        // Kernels before 4.17 take MAP_FIXED_NOREPLACE for a hint and may map elsewhere.
        if got as usize != want {
            unmap(got);
            continue;
        }
        return std::ptr::NonNull::new(got.cast());
    }
    None
}

/// The slot of ISA-L's match table that its stray hash files a stream's third byte in, for a
/// state whose address has `bits` as its bits 16 to 47: the `crc32` instruction (CRC-32C from
/// zero, no final inversion) of them, cut to level 2's 32K slots.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn stray_slot(bits: u32) -> u32 {
    let mut crc = bits;
    for _ in 0..32 {
        crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
    }
    crc & (SLOTS - 1)
}

/// Slots in level 2's match table, the largest of the levels the stray hash is in.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const SLOTS: u32 = isal::IGZIP_HIST_SIZE;

/// A zlib stream of ISA-L's igzip, reused from one content to the next: its state (82 KB) and
/// its level's buffer are made once a thread, not once a content.
struct Stream {
    state: State,
    /// ISA-L's working memory for levels 1 to 3; `state` points into it.
    level_buf: Vec<u8>,
    level: u32,
    /// Made on first use: a stream that only deflates pieces (see `pieces`) needs none.
    out: Box<[u8]>,
}

impl Stream {
    fn new(level: u32) -> Self {
        Self::with_state(level, State::new())
    }

    fn with_state(level: u32, state: State) -> Self {
        let size = match level {
            1 => isal::ISAL_DEF_LVL1_DEFAULT,
            2 => isal::ISAL_DEF_LVL2_DEFAULT,
            _ => isal::ISAL_DEF_LVL3_DEFAULT,
        };
        Stream {
            state,
            level_buf: vec![0; size as usize],
            level,
            out: Box::default(),
        }
    }

    /// Starts a new zlib stream.
    fn start(&mut self) {
        self.reset(isal::IGZIP_ZLIB, isal::NO_FLUSH);
    }

    /// Starts a new stream of this `framing` (zlib, raw deflate), ending each call's output
    /// with `flush`; returns the state.
    fn reset(&mut self, framing: u32, flush: u32) -> &mut isal::isal_zstream {
        // SAFETY: the state's own block, set up by isal_deflate_init and used by this stream only.
        let s = unsafe { self.state.ptr.as_mut() };
        // SAFETY: a stream set up by isal_deflate_init.
        unsafe { isal::isal_deflate_reset(s) };
        s.level = self.level;
        s.level_buf = self.level_buf.as_mut_ptr();
        s.level_buf_size = self.level_buf.len() as u32;
        s.gzip_flag = framing as u16;
        s.flush = flush as u16;
        s
    }

    /// Appends `input` to `out` raw-deflated on its own, from an empty history: one piece of a
    /// content deflated in pieces (see `pieces`). All but the `last` end in a sync flush (an
    /// empty stored block, byte-aligned) and leave the stream open, for the next to follow.
    fn piece(&mut self, input: &[u8], last: bool, out: &mut Vec<u8>) {
        let flush = if last {
            isal::NO_FLUSH
        } else {
            isal::SYNC_FLUSH
        };
        let s = self.reset(isal::IGZIP_DEFLATE, flush);
        s.next_in = input.as_ptr().cast_mut();
        s.avail_in = input.len() as u32;
        s.end_of_stream = u16::from(last);
        // Room for all of it in one call, as deflate grows data by its blocks' headers only:
        // the same room for the same input, so that the bytes depend on the input alone.
        let room = input.len() + input.len() / 16 + 64;
        loop {
            out.reserve(room);
            s.next_out = out.spare_capacity_mut().as_mut_ptr().cast();
            s.avail_out = room as u32;
            // SAFETY: next_in and next_out point to `avail_in` and `avail_out` valid bytes (ISA-L
            // writes the output's spare capacity), and level_buf to the stream's own buffer.
            let done = unsafe { deflate_call(s, last) };
            let written = room - s.avail_out as usize;
            // SAFETY: ISA-L wrote the first `written` bytes of the spare capacity.
            unsafe { out.set_len(out.len() + written) };
            if done {
                return;
            }
        }
    }

    /// Deflates the stream's next `input` (`IN_BLOCK` bytes, or fewer for the last, which
    /// `last` says), handing its output to `sink` as it comes.
    fn block(&mut self, input: &[u8], last: bool, mut sink: impl FnMut(&[u8])) {
        debug_assert!(input.len() <= IN_BLOCK);
        // SAFETY: the state's own block, set up by isal_deflate_init and used by this stream only.
        let s = unsafe { self.state.ptr.as_mut() };
        s.next_in = input.as_ptr().cast_mut();
        s.avail_in = input.len() as u32;
        s.end_of_stream = u16::from(last);
        if self.out.is_empty() {
            self.out = vec![0; OUT_BLOCK].into_boxed_slice();
        }
        loop {
            s.next_out = self.out.as_mut_ptr();
            s.avail_out = self.out.len() as u32;
            // SAFETY: next_in and next_out point to `avail_in` and `avail_out` valid bytes, and
            // level_buf to the stream's own buffer.
            let done = unsafe { deflate_call(s, last) };
            let written = self.out.len() - s.avail_out as usize;
            sink(&self.out[..written]);
            if done {
                return;
            }
        }
    }
}

/// One call of ISA-L's deflate; returns whether it is done with the stream (when the input is
/// the `last`) or with the input given.
///
/// # Safety
/// `next_in` and `next_out` point to `avail_in` and `avail_out` valid bytes (ISA-L only reads
/// the input), and `level_buf` to the stream's own buffer, alive with it.
unsafe fn deflate_call(s: &mut isal::isal_zstream, last: bool) -> bool {
    // SAFETY: as the caller says.
    let code = unsafe { isal::isal_deflate(s) };
    // Only a bad parameter fails, and every parameter here is fixed.
    assert_eq!(code, isal::COMP_OK as i32, "isal_deflate failed");
    if last {
        s.internal_state.state == isal::isal_zstate_state_ZSTATE_END
    } else {
        s.avail_in == 0 && s.avail_out > 0
    }
}

/// Deflates data with a reusable compressor (one per worker thread): ISA-L's igzip, which at
/// level 1 ran 2.2 to 2.5 times as fast as libdeflate for a 5% larger output (PERFORMANCE.md).
pub struct Deflater {
    level: u8,
    stream: Stream,
    scratch: Vec<u8>,
}

impl Deflater {
    /// A deflater for a level on zlib's scale, 1 to 12: ISA-L has three, so 1 is its fastest,
    /// 2 to 5 its second, 6 and above its smallest.
    pub fn new(level: u8) -> Self {
        let isal_level = match level {
            0 | 1 => 1,
            2..=5 => 2,
            _ => 3,
        };
        Deflater {
            level,
            stream: Stream::new(isal_level),
            scratch: Vec::new(),
        }
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    /// `data` zlib-deflated, in the scratch buffer.
    pub fn deflated(&mut self, data: &[u8]) -> &[u8] {
        let n = self.deflate(data);
        &self.scratch[..n]
    }

    /// zlib-deflates `data` into the scratch buffer, in `IN_BLOCK` steps; returns the compressed
    /// length.
    fn deflate(&mut self, data: &[u8]) -> usize {
        self.scratch.clear();
        // Room for all of it, as deflate rarely grows data: not grown and copied block by block.
        self.scratch.reserve(data.len() + data.len() / 16 + 64);
        self.stream.start();
        for (block, last) in blocks(data) {
            let scratch = &mut self.scratch;
            self.stream
                .block(block, last, |out| scratch.extend_from_slice(out));
        }
        self.scratch.len()
    }

    /// Starts a zlib stream of a content given block by block to `block`.
    pub fn start(&mut self) {
        self.stream.start();
    }

    /// Deflates the next block of the stream `start` began (`IN_BLOCK` bytes, or fewer for the
    /// last, which `last` says), handing its output to `sink` as it comes.
    pub fn block(&mut self, input: &[u8], last: bool, sink: impl FnMut(&[u8])) {
        self.stream.block(input, last, sink);
    }

    /// Picks the encoding for `data` and returns it with the bytes to base64: the deflated form
    /// when `compress` asks for it and it pays, else `data` itself. Text has already been sent as
    /// text where it could be, so everything that reaches here is binary.
    pub fn choose<'a>(&'a mut self, data: &'a [u8], compress: Compress) -> (Encoding, &'a [u8]) {
        let len = data.len() as u64;
        if worth_deflating(data, len, compress) {
            let n = self.deflate(data);
            if compress.keeps(n as u64, len) {
                return (Encoding::Base64Compressed, &self.scratch[..n]);
            }
        }
        (Encoding::Base64Binary, data)
    }
}

/// Whether binary content of `len` bytes is worth deflating under `compress`, judged by its
/// first bytes (`head`: its first block, or all of it).
pub fn worth_deflating(head: &[u8], len: u64, compress: Compress) -> bool {
    match compress {
        Compress::Never => false,
        Compress::Always => true,
        Compress::Auto => {
            len >= MIN_COMPRESS as u64
                && !is_precompressed(head)
                && entropy(&head[..head.len().min(PROBE)]) < INCOMPRESSIBLE_BITS
        }
    }
}

/// Per-thread working memory, kept across records so that big buffers are not allocated (and
/// their pages faulted in) again for every record.
pub struct Scratch {
    pub deflater: Deflater,
    /// `content_base64` decoded, or a `content_path` file read (whole, or a block at a time).
    pub bytes: Vec<u8>,
    /// Where the records this thread encodes go when they grow big.
    pub spill: Spill,
    /// The `content_path` file the planning threads opened for the record being encoded, if
    /// any: taken by its read, dropped (closed) after the record.
    pub(crate) opened: Option<OpenedFile>,
    /// What deserves a warning about the record just encoded, if anything: taken with it (see
    /// `writer::Encoded::ended`), dropped if it is refused after all.
    pub warning: Option<String>,
}

/// Above this a scratch buffer is given back after use: one huge record must not pin its size.
const KEEP: usize = 4 << 20;

impl Scratch {
    pub fn new(level: u8) -> Self {
        Scratch {
            deflater: Deflater::new(level),
            bytes: Vec::new(),
            spill: Spill::default(),
            opened: None,
            warning: None,
        }
    }

    pub fn trim(&mut self) {
        if self.bytes.capacity() > KEEP {
            self.bytes = Vec::new();
        }
        if self.deflater.scratch.capacity() > KEEP {
            self.deflater.scratch = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn inflate(b64: &[u8]) -> Vec<u8> {
        let raw = STANDARD.decode_to_vec(b64).unwrap();
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn compressible_binary_is_deflated_and_round_trips() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        let mut out = Vec::new();
        let mut d = Deflater::new(6);
        let (enc, payload) = d.choose(&data, Compress::Auto);
        base64_into(&mut out, payload);
        assert_eq!(enc, Encoding::Base64Compressed);
        assert!(out.len() < data.len() / 10);
        assert_eq!(inflate(&out), data);
    }

    #[test]
    fn incompressible_and_precompressed_data_is_only_base64() {
        let mut state = 0x2545F4914F6CDD1Du64;
        let noise: Vec<u8> = (0..200_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut d = Deflater::new(6);
        let (enc, payload) = d.choose(&noise, Compress::Auto);
        assert_eq!(enc, Encoding::Base64Binary);
        assert_eq!(payload, &noise[..]);

        let zipped = [b"PK\x03\x04".as_slice(), &[0u8; 4096]].concat();
        assert_eq!(d.choose(&zipped, Compress::Auto).0, Encoding::Base64Binary);
        let (enc, payload) = d.choose(&zipped, Compress::Always);
        assert_eq!(enc, Encoding::Base64Compressed);
        let mut out = Vec::new();
        base64_into(&mut out, payload);
        assert_eq!(inflate(&out), zipped);
        // Small data is not worth the zlib header.
        assert_eq!(
            d.choose(&[0u8; 64], Compress::Auto).0,
            Encoding::Base64Binary
        );
    }

    #[test]
    fn entropy_tells_noise_from_structure() {
        let mut state = 1u64;
        let noise: Vec<u8> = (0..65536)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                (state >> 56) as u8
            })
            .collect();
        assert!(entropy(&noise) > 7.9);
        assert!(entropy(b"aaaaaaaa") < 0.01);
        assert!(
            entropy(
                "the search appliance indexes the feed "
                    .repeat(100)
                    .as_bytes()
            ) < 4.5
        );
    }

    #[test]
    fn every_level_deflates_across_blocks_and_empty_content() {
        // More than two blocks of ISA-L's input, ending inside the third.
        let data: Vec<u8> = (0..2 * IN_BLOCK + 12_345)
            .map(|i| ((i % 251) ^ (i / 4096)) as u8)
            .collect();
        for level in [1, 2, 6, 12] {
            let mut d = Deflater::new(level);
            for content in [&data[..], b"", &data[..IN_BLOCK]] {
                let mut out = Vec::new();
                base64_into(&mut out, d.deflated(content));
                assert_eq!(inflate(&out), content, "level {level}");
            }
        }
        // Higher levels spend more to make less.
        let sizes: Vec<usize> = [1, 6]
            .map(|level| Deflater::new(level).deflated(&data).len())
            .to_vec();
        assert!(sizes[1] < sizes[0], "{sizes:?}");
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn the_same_content_deflates_to_the_same_bytes_wherever_the_state_lies() {
        // ISA-L hashes the third byte of this text ("cume") under the state's address: where
        // that hash is 355 (the slot of "ocum", the second), the third repeat misses its match.
        let text = "document 397 <&> ".repeat(20);
        let deflate = |mut stream: Stream| {
            let mut out = Vec::new();
            stream.start();
            stream.block(text.as_bytes(), true, |piece| out.extend_from_slice(piece));
            out
        };
        let pinned = deflate(Stream::with_state(1, State::in_slot(PINNED_SLOT)));
        assert_ne!(
            deflate(Stream::with_state(1, State::in_slot(355))),
            pinned,
            "ISA-L no longer hashes the state's address: State can be a plain allocation"
        );
        // Deflaters alive together, so at different addresses, as each thread's is.
        let mut deflaters: Vec<Deflater> = (0..64).map(|_| Deflater::new(1)).collect();
        for d in &mut deflaters {
            assert_eq!(d.deflated(text.as_bytes()), pinned);
        }
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn a_state_is_mapped_well_below_the_main_stack() {
        let state = State::new();
        // SAFETY: reads the process's auxiliary vector.
        let top = unsafe { libc::getauxval(libc::AT_RANDOM) } as usize;
        let end = state.ptr.as_ptr() as usize + std::mem::size_of::<isal::isal_zstream>();
        assert!(state.mapped && end + STACK_BERTH <= top, "{end:x} {top:x}");
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn a_state_with_no_address_to_map_is_allocated_and_deflates_to_valid_bytes() {
        // Page 0 is never a state's.
        let state = State::in_slot_below(PINNED_SLOT, Some(0));
        assert!(!state.mapped);
        let text = "document 397 <&> ".repeat(20);
        let mut stream = Stream::with_state(1, state);
        let mut deflated = Vec::new();
        stream.start();
        stream.block(text.as_bytes(), true, |piece| {
            deflated.extend_from_slice(piece)
        });
        let mut inflated = String::new();
        flate2::read::ZlibDecoder::new(&deflated[..])
            .read_to_string(&mut inflated)
            .unwrap();
        assert_eq!(inflated, text);
    }

    #[test]
    fn base64_in_pieces_is_the_base64_of_the_whole() {
        let data: Vec<u8> = (0..100u8).collect();
        let mut whole = Vec::new();
        base64_into(&mut whole, &data);
        for a in 0..data.len() {
            for b in [a, a + 1, a + 2, a + 5, data.len()] {
                let b = b.min(data.len());
                let mut stream = Base64Stream::default();
                let mut out = Vec::new();
                for piece in [&data[..a], &data[a..b], &data[b..]] {
                    stream.push(&mut out, piece);
                }
                assert_eq!(stream.finish(&mut out), data.len() as u64);
                assert_eq!(out, whole, "cut at {a} and {b}");
            }
        }
    }

    #[test]
    fn never_means_plain_base64() {
        let data = vec![7u8; 10_000];
        assert_eq!(
            Deflater::new(6).choose(&data, Compress::Never).0,
            Encoding::Base64Binary
        );
    }

    fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
        let mut out = vec![1, 2, 3];
        decode_base64_into(text, &mut out).map(|()| out)
    }

    #[test]
    fn user_base64_tolerates_wrapping_and_missing_padding_but_not_garbage() {
        assert_eq!(decode_base64("Zm9v\nYmFy\n").unwrap(), b"foobar");
        assert_eq!(decode_base64("Zm9vYg").unwrap(), b"foob");
        assert_eq!(decode_base64("Zm9vYg==").unwrap(), b"foob");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("Zm9v!").unwrap_err().contains("offset 4"));
        assert!(decode_base64("Z").is_err());
    }

    #[test]
    fn base64_appends_after_existing_bytes() {
        let mut out = b"<x>".to_vec();
        base64_into(&mut out, b"foobar");
        assert_eq!(out, b"<x>Zm9vYmFy");
    }
}
