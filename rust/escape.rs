//! XML escaping that round-trips exactly.
//!
//! A parser hands the receiver back the very characters we were given: `&`, `<`, `>` become
//! entities, and the characters that XML would silently rewrite become character references
//! (CR in text, which end-of-line handling turns into LF; TAB, LF and CR in attribute values,
//! which attribute-value normalisation turns into spaces). Characters that XML 1.0 cannot carry at
//! all (C0 controls other than TAB/LF/CR, U+FFFE, U+FFFF) make escaping fail, so the caller can
//! switch to base64 instead of dropping them.
//!
//! The input is escaped a segment at a time. Its bytes that need a look are flagged 64 at a
//! time by vector compares (AVX2 where the CPU has it, learnt at run time; SSE2, part of the
//! x86_64 baseline, otherwise) and their positions listed; then the segment is written in one
//! pass over that list, each run of clean bytes and each escape copied with moves of fixed size.
//! A loop per block of bytes ended at an unpredictable count of escapes in every block, which
//! cost a mispredicted branch every 32 bytes of markup-dense text; the list has one end a
//! segment. Clean text is only scanned and copied whole.
//!
//! Element content may instead go in CDATA sections (`text_into`), which carry markup as it is:
//! a segment goes as a section when its escapes would add more than the section's 12 bytes of
//! markup (with what a section writes apart: each CR outside it as `&#13;`, since a parser turns
//! a raw CR into LF even in a section, and each `]]>` split across two sections). Markup-dense
//! text shrinks by a tenth or more. Both ways are weighed by counting the bits of each kind of
//! byte a block at a time (`weigh`); the escapes are listed only for a segment that stays
//! escaped. Attribute values, and the elements of other formats, are only escaped.

/// Where the escaped text goes, which decides what must be escaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Element content: TAB and LF pass through.
    Text,
    /// A double-quoted attribute value.
    Attribute,
}

/// The input holds a character XML 1.0 cannot represent, at this byte offset.
#[derive(Debug, PartialEq, Eq)]
pub struct Unrepresentable {
    pub offset: usize,
}

use std::mem::MaybeUninit;

/// Bytes scanned at once, a bit each in a `u64`.
const BLOCK: usize = 64;
/// Bytes escaped at once (a multiple of `BLOCK`): their flagged positions are listed first.
const SEGMENT: usize = 4096;

/// Whether a byte needs a look: markup, controls (escaped or refused), and 0xEF, which leads
/// U+F000..U+FFFF and so the two forbidden noncharacters.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn needs_care(b: u8, ctx: Context) -> bool {
    let control = match ctx {
        Context::Text => b < 0x20 && b != b'\n' && b != b'\t',
        Context::Attribute => b < 0x20,
    };
    let quote = ctx == Context::Attribute && b == b'"';
    control | quote | (b == b'&') | (b == b'<') | (b == b'>') | (b == 0xEF)
}

/// One bit per byte of `block` that `needs_care`.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn portable_mask(block: &[u8; BLOCK], ctx: Context) -> u64 {
    let mut mask = 0u64;
    for (j, &b) in block.iter().enumerate() {
        mask |= u64::from(needs_care(b, ctx)) << j;
    }
    mask
}

/// How blocks are scanned for the bytes that need a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// SSE2 compares on x86_64, part of its baseline (byte by byte elsewhere).
    Baseline,
    /// AVX2 compares, on x86_64 CPUs that have them (and BMI1 and POPCNT, which every CPU with
    /// AVX2 has, to list the positions). Not AVX-512: many of the servers users run on lack it.
    Avx2,
}

impl Scan {
    /// The scans this CPU can run, the fastest last. `escape_into` takes the fastest; each is
    /// exposed so that tests and the fuzz target check every one the machine can run.
    pub fn available() -> Vec<Scan> {
        let mut scans = vec![Scan::Baseline];
        if Scan::best() == Scan::Avx2 {
            scans.push(Scan::Avx2);
        }
        scans
    }

    /// The fastest scan this CPU runs (std caches what the CPU has: this is a load and a test).
    #[inline(always)]
    fn best() -> Scan {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            return Scan::Avx2;
        }
        Scan::Baseline
    }
}

/// A way to flag the bytes of a block that need a look (`needs_care`), one bit each.
trait Mask: Copy {
    fn mask(self, block: &[u8; BLOCK], ctx: Context) -> u64;
    /// What `content_segment` weighs of a block of element content.
    fn text_bits(self, block: &[u8; BLOCK]) -> TextBits;
    /// `weigh` with this scan, where its `text_bits` inline.
    #[inline(always)]
    fn weigh(
        self,
        segment: &Segment<'_>,
        open: bool,
        bits: &mut Bits,
    ) -> Result<Weighed, Unrepresentable> {
        weigh(self, segment, open, bits)
    }
}

/// The bytes of a block of element content by what they cost each way (`content_segment`), one
/// bit each: a segment's escapes and what a section writes apart are counted from them, a
/// block at a time, instead of flagged byte by flagged byte (markup-dense text has 50 in a KB).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TextBits {
    /// `&`, `<`, `>` and CR, which escaping writes as references 3 bytes longer (`&lt;`)...
    escaped: u64,
    /// ...or 4 (`&amp;`, `&#13;`).
    longer: u64,
    cr: u64,
    /// `>` and `]`, which make the `]]>` a section must split.
    gt: u64,
    bracket: u64,
    /// Controls other than TAB, LF and CR, and 0xEF: what may start a character XML cannot
    /// carry (`refused`). With `escaped`, the bytes `needs_care` flags in text.
    odd: u64,
}

/// Adds the `TextBits` of the vector `v` (a part of a block, which `bits` places) to `t`, with
/// the compares of one vector width (SSE2's or AVX2's: the same steps either way).
#[cfg(target_arch = "x86_64")]
macro_rules! text_bits_of {
    ($t:ident, $v:ident, $bits:ident, $cmpeq:ident, $set1:ident, $min:ident, $or:ident, $andnot:ident) => {
        let is = |b: u8| $cmpeq($v, $set1(b as i8));
        // Below 0x20, unsigned: min(v, 0x1F) is v.
        let control = $cmpeq($min($v, $set1(0x1F)), $v);
        let (cr, gt) = (is(b'\r'), is(b'>'));
        let longer = $or(is(b'&'), cr);
        let escaped = $or(longer, $or(is(b'<'), gt));
        let spaces = $or($or(is(b'\t'), is(b'\n')), cr);
        let odd = $or($andnot(spaces, control), is(0xEF));
        $t.escaped |= $bits(escaped);
        $t.longer |= $bits(longer);
        $t.cr |= $bits(cr);
        $t.gt |= $bits(gt);
        $t.bracket |= $bits(is(b']'));
        $t.odd |= $bits(odd);
    };
}

/// `TextBits` a byte at a time.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn portable_text_bits(block: &[u8; BLOCK]) -> TextBits {
    let mut t = TextBits::default();
    for (j, &b) in block.iter().enumerate() {
        let bit = |on: bool| u64::from(on) << j;
        t.escaped |= bit(matches!(b, b'&' | b'<' | b'>' | b'\r'));
        t.longer |= bit(matches!(b, b'&' | b'\r'));
        t.cr |= bit(b == b'\r');
        t.gt |= bit(b == b'>');
        t.bracket |= bit(b == b']');
        t.odd |= bit((b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || b == 0xEF);
    }
    t
}

#[derive(Clone, Copy)]
struct Baseline;

#[cfg(not(target_arch = "x86_64"))]
impl Mask for Baseline {
    #[inline(always)]
    fn mask(self, block: &[u8; BLOCK], ctx: Context) -> u64 {
        portable_mask(block, ctx)
    }

    fn text_bits(self, block: &[u8; BLOCK]) -> TextBits {
        portable_text_bits(block)
    }
}

#[cfg(target_arch = "x86_64")]
impl Mask for Baseline {
    #[inline(always)]
    fn mask(self, block: &[u8; BLOCK], ctx: Context) -> u64 {
        use std::arch::x86_64::{
            _mm_andnot_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        let mut mask = 0u64;
        for part in 0..BLOCK / 16 {
            // SAFETY: SSE2 is part of the x86_64 baseline, so its intrinsics are always there;
            // the load reads 16 bytes of the 64-byte block, unaligned.
            let bits = unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(16 * part).cast());
                let is = |b: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8));
                // Below 0x20, unsigned: min(v, 0x1F) is v.
                let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v);
                let markup = _mm_or_si128(
                    _mm_or_si128(is(b'&'), is(b'<')),
                    _mm_or_si128(is(b'>'), is(0xEF)),
                );
                let care = match ctx {
                    Context::Text => _mm_andnot_si128(_mm_or_si128(is(b'\n'), is(b'\t')), control),
                    Context::Attribute => _mm_or_si128(control, is(b'"')),
                };
                _mm_movemask_epi8(_mm_or_si128(markup, care)) as u16
            };
            mask |= u64::from(bits) << (16 * part);
        }
        mask
    }

    #[inline(always)]
    fn text_bits(self, block: &[u8; BLOCK]) -> TextBits {
        use std::arch::x86_64::{
            _mm_andnot_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        let mut t = TextBits::default();
        for part in 0..BLOCK / 16 {
            // SAFETY: as in `mask`.
            unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(16 * part).cast());
                let bits = |v| u64::from(_mm_movemask_epi8(v) as u16) << (16 * part);
                text_bits_of!(
                    t,
                    v,
                    bits,
                    _mm_cmpeq_epi8,
                    _mm_set1_epi8,
                    _mm_min_epu8,
                    _mm_or_si128,
                    _mm_andnot_si128
                );
            }
        }
        t
    }
}

/// AVX2's scan: a block in two compares of 32 bytes (only built into code that runs where the
/// CPU has AVX2, with BMI1 and POPCNT for the positions: see `Scan::best`).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Mask for Avx2 {
    #[inline(always)]
    fn mask(self, block: &[u8; BLOCK], ctx: Context) -> u64 {
        // SAFETY: an `Avx2` is only used by `escape_avx2`, `text_avx2` and `find_avx2`, which
        // run only where the CPU has AVX2.
        unsafe { avx2_mask(block, ctx) }
    }

    #[inline(always)]
    fn text_bits(self, block: &[u8; BLOCK]) -> TextBits {
        // SAFETY: as in `mask`.
        unsafe { avx2_text_bits(block) }
    }

    #[inline(always)]
    fn weigh(
        self,
        segment: &Segment<'_>,
        open: bool,
        bits: &mut Bits,
    ) -> Result<Weighed, Unrepresentable> {
        // SAFETY: as in `mask`.
        unsafe { avx2_weigh(segment, open, bits) }
    }
}

/// `weigh` compiled for AVX2, its blocks' `text_bits` inlined: called from the closure
/// `text_with` hands `by_segments`, which is compiled without, a block at a time they were a
/// call each (a sixth of the CPU of `add_arrow` of markup-dense text).
///
/// # Safety
/// The CPU must have AVX2, BMI1 and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn avx2_weigh(
    segment: &Segment<'_>,
    open: bool,
    bits: &mut Bits,
) -> Result<Weighed, Unrepresentable> {
    weigh(Avx2, segment, open, bits)
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn avx2_text_bits(block: &[u8; BLOCK]) -> TextBits {
    use std::arch::x86_64::{
        _mm256_andnot_si256, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8,
        _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
    };
    let mut t = TextBits::default();
    for part in 0..BLOCK / 32 {
        // The load reads 32 bytes of the 64-byte block, unaligned.
        let v = _mm256_loadu_si256(block.as_ptr().add(32 * part).cast());
        let bits = |v| u64::from(_mm256_movemask_epi8(v) as u32) << (32 * part);
        text_bits_of!(
            t,
            v,
            bits,
            _mm256_cmpeq_epi8,
            _mm256_set1_epi8,
            _mm256_min_epu8,
            _mm256_or_si256,
            _mm256_andnot_si256
        );
    }
    t
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn avx2_mask(block: &[u8; BLOCK], ctx: Context) -> u64 {
    use std::arch::x86_64::{
        _mm256_andnot_si256, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8,
        _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
    };
    let mut mask = 0u64;
    for part in 0..BLOCK / 32 {
        // The load reads 32 bytes of the 64-byte block, unaligned.
        let v = _mm256_loadu_si256(block.as_ptr().add(32 * part).cast());
        let control = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1F)), v);
        let amp = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'&' as i8));
        let lt = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'<' as i8));
        let gt = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'>' as i8));
        let ef = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(0xEFu8 as i8));
        let markup = _mm256_or_si256(_mm256_or_si256(amp, lt), _mm256_or_si256(gt, ef));
        let care = match ctx {
            Context::Text => {
                let lf = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\n' as i8));
                let tab = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\t' as i8));
                _mm256_andnot_si256(_mm256_or_si256(lf, tab), control)
            }
            Context::Attribute => {
                let quote = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8));
                _mm256_or_si256(control, quote)
            }
        };
        let bits = _mm256_movemask_epi8(_mm256_or_si256(markup, care)) as u32;
        mask |= u64::from(bits) << (32 * part);
    }
    mask
}

#[cfg(not(target_arch = "x86_64"))]
impl Mask for Avx2 {
    fn mask(self, _: &[u8; BLOCK], _: Context) -> u64 {
        unreachable!("AVX2 is only offered on x86_64")
    }

    fn text_bits(self, _: &[u8; BLOCK]) -> TextBits {
        unreachable!("AVX2 is only offered on x86_64")
    }
}

/// An escape, padded to 8 bytes so that it is copied with one move, and its length.
struct Escape([u8; 8], usize);

const fn escape(s: &[u8]) -> Escape {
    let mut padded = [0; 8];
    let mut i = 0;
    while i < s.len() {
        padded[i] = s[i];
        i += 1;
    }
    Escape(padded, s.len())
}

/// The escapes, by the codes of `codes`.
const ESCAPES: [Escape; 8] = [
    escape(b""),
    escape(b"&amp;"),
    escape(b"&lt;"),
    escape(b"&gt;"),
    escape(b"&#13;"),
    escape(b"&quot;"),
    escape(b"&#10;"),
    escape(b"&#9;"),
];

/// The most an escape adds to its byte (`&quot;`).
const MAX_GROWTH: usize = 5;

/// Each byte's escape in `ctx`, as its index in `ESCAPES`; 0 for a byte that stays itself, or
/// that is flagged to be looked at (a control without an escape, 0xEF: see `refused`).
const fn codes(ctx: Context) -> [u8; 256] {
    let mut codes = [0; 256];
    codes[b'&' as usize] = 1;
    codes[b'<' as usize] = 2;
    codes[b'>' as usize] = 3;
    codes[b'\r' as usize] = 4;
    if matches!(ctx, Context::Attribute) {
        codes[b'"' as usize] = 5;
        codes[b'\n' as usize] = 6;
        codes[b'\t' as usize] = 7;
    }
    codes
}

static TEXT_CODES: [u8; 256] = codes(Context::Text);
static ATTRIBUTE_CODES: [u8; 256] = codes(Context::Attribute);

/// Whether the flagged byte at `i`, which has no escape, starts a character XML cannot carry:
/// a control, or 0xEF leading U+FFFE or U+FFFF (0xEF 0xBF 0xBE or 0xBF).
#[inline(always)]
fn refused(bytes: &[u8], i: usize) -> bool {
    bytes[i] < 0x20
        || (bytes.get(i + 1) == Some(&0xBF) && matches!(bytes.get(i + 2), Some(0xBE | 0xBF)))
}

/// The positions of the bytes flagged in the blocks of a segment of `len` bytes (a multiple of
/// `BLOCK`), into `found`, given each block's flags by its start (`flags`); returns how many.
/// Four positions of a block are written whatever its count, without a branch: most blocks of
/// text have no more, and those past the count are overwritten or never read.
#[inline(always)]
fn flagged(
    len: usize,
    mut flags: impl FnMut(usize) -> u64,
    found: &mut [MaybeUninit<u16>; SEGMENT + 8],
) -> usize {
    let mut n = 0;
    for base in (0..len).step_by(BLOCK) {
        let mut mask = flags(base);
        let count = mask.count_ones() as usize;
        // A block's positions lie within it, so `n` is at most `base` here: the writes stay
        // within `found`.
        for k in 0..4 {
            found[n + k].write((base + mask.trailing_zeros() as usize) as u16);
            mask &= mask.wrapping_sub(1);
        }
        if count > 4 {
            let mut k = 4;
            while mask != 0 {
                found[n + k].write((base + mask.trailing_zeros() as usize) as u16);
                mask &= mask.wrapping_sub(1);
                k += 1;
            }
        }
        n += count;
    }
    n
}

/// The block of `src` that starts at `at`.
#[inline(always)]
fn block_at(src: &[u8], at: usize) -> &[u8; BLOCK] {
    src[at..at + BLOCK].try_into().expect("a block")
}

/// Appends the escaped form of `src[..real]` to `out`. `src` holds `BLOCK` bytes to read past
/// `len`, the length scanned (`real` rounded up to a block: past `real`, spaces, which need no
/// care); it is the input `bytes` from `base` on, or a copy of its last bytes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn escape_segment(
    out: &mut Vec<u8>,
    src: &[u8],
    len: usize,
    real: usize,
    bytes: &[u8],
    base: usize,
    ctx: Context,
    scan: impl Mask,
) -> Result<(), Unrepresentable> {
    debug_assert!(
        len.is_multiple_of(BLOCK) && real <= len && len <= SEGMENT && src.len() >= len + BLOCK
    );
    // Not zeroed: as big as a segment, it would cost more than most segments' escaping.
    let mut found = [MaybeUninit::uninit(); SEGMENT + 8];
    let found = listed(len, |at| scan.mask(block_at(src, at), ctx), &mut found);
    let codes = match ctx {
        Context::Text => &TEXT_CODES,
        Context::Attribute => &ATTRIBUTE_CODES,
    };
    write_escaped(out, src, 0, real, bytes, base, found, codes)
}

/// The positions `flagged` lists, as a slice of `found`.
#[inline(always)]
fn listed(
    len: usize,
    flags: impl FnMut(usize) -> u64,
    found: &mut [MaybeUninit<u16>; SEGMENT + 8],
) -> &[u16] {
    let n = flagged(len, flags, found);
    // SAFETY: `flagged` wrote the first `n` positions.
    unsafe { &*(std::ptr::from_ref(&found[..n]) as *const [u16]) }
}

/// Appends `src[start..real]` to `out` with the bytes at the positions `found` escaped by
/// `codes` (see `escape_segment` for `src`, `bytes` and `base`; `start` skips the end of a
/// character a section before wrote, see `content_segment`).
// Inlined into its two callers, where the arguments are locals: a struct would only name them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write_escaped(
    out: &mut Vec<u8>,
    src: &[u8],
    start: usize,
    real: usize,
    bytes: &[u8],
    base: usize,
    found: &[u16],
    codes: &[u8; 256],
) -> Result<(), Unrepresentable> {
    // Room for every escape at its longest, and the overshoot of the moves of fixed size.
    out.reserve(real + found.len() * MAX_GROWTH + BLOCK + 8);
    let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    // `from`: the first byte of `src` not yet written; `at`: the bytes written.
    let (mut from, mut at) = (start, 0);
    for &j in found {
        let j = usize::from(j);
        let code = codes[usize::from(src[j])];
        if code == 0 {
            if refused(bytes, base + j) {
                return Err(Unrepresentable { offset: base + j });
            }
            continue;
        }
        let Escape(padded, grown) = &ESCAPES[usize::from(code)];
        let run = j - from;
        // SAFETY: each move reads a block from below `j` (`from + copied < j < len`), within
        // `src`, which holds a block past `len`; `dst` has room for a block past `at + run`,
        // and for the escape, as `at + run` is at most `real + n * MAX_GROWTH` (reserved above)
        // less what is still to write.
        unsafe {
            let (from_ptr, to_ptr) = (src.as_ptr().add(from), dst.add(at));
            // The run in moves of a block (what lands past it is overwritten next): one, most
            // often, and no call.
            std::ptr::copy_nonoverlapping(from_ptr, to_ptr, BLOCK);
            let mut copied = BLOCK;
            while copied < run {
                std::ptr::copy_nonoverlapping(from_ptr.add(copied), to_ptr.add(copied), BLOCK);
                copied += BLOCK;
            }
            std::ptr::copy_nonoverlapping(padded.as_ptr(), to_ptr.add(run), 8);
        }
        at += run + grown;
        from = j + 1;
    }
    // SAFETY: `src[from..real]` is in bounds, and `dst` has room for it after `at`; then every
    // byte up to `at` has been written.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr().add(from), dst.add(at), real - from);
        out.set_len(out.len() + at + real - from);
    }
    Ok(())
}

/// A CDATA section's markup.
const SECTION_OPEN: &[u8] = b"<![CDATA[";
const SECTION_CLOSE: &[u8] = b"]]>";
/// A CR, outside any section: a parser turns a raw CR into LF, in a section too.
const CR: &[u8] = b"&#13;";
/// What a CR within a section adds: the section closed, the reference, another opened.
const SECTION_CR: usize = SECTION_CLOSE.len() + CR.len() + SECTION_OPEN.len() - 1;
/// What the `>` of a `]]>` within a section adds: the section closed before it (its `]]` in
/// it) and another opened (`]]]]><![CDATA[>`).
const SECTION_SPLIT: usize = SECTION_CLOSE.len() + SECTION_OPEN.len();

/// A segment to weigh (see `escape_segment` for `src`, `len`, `bytes` and `base`).
struct Segment<'a> {
    src: &'a [u8],
    len: usize,
    bytes: &'a [u8],
    base: usize,
}

/// A segment's blocks' flags, one `u64` a block: the bytes escaping flags (`needs_care`), and
/// what a section writes apart (its CRs and the `>` of each `]]>` whose brackets are in it).
/// Left unset past the segment's blocks: zeroed whole, they were a KB to clear for every
/// segment, twice for a 1 KB text (its last block goes apart).
struct Bits {
    care: [MaybeUninit<u64>; SEGMENT / BLOCK],
    apart: [MaybeUninit<u64>; SEGMENT / BLOCK],
    /// The blocks set, the first ones.
    blocks: usize,
}

impl Bits {
    fn new() -> Self {
        Bits {
            care: [MaybeUninit::uninit(); SEGMENT / BLOCK],
            apart: [MaybeUninit::uninit(); SEGMENT / BLOCK],
            blocks: 0,
        }
    }

    /// Sets the next block's flags.
    #[inline(always)]
    fn push(&mut self, care: u64, apart: u64) {
        self.care[self.blocks].write(care);
        self.apart[self.blocks].write(apart);
        self.blocks += 1;
    }

    /// The flags escaping writes, of each block set.
    #[inline(always)]
    fn care(&self) -> &[u64] {
        // SAFETY: `push` set the first `blocks`.
        unsafe { &*(std::ptr::from_ref(&self.care[..self.blocks]) as *const [u64]) }
    }

    /// What a section writes apart, of each block set.
    #[inline(always)]
    fn apart(&self) -> &[u64] {
        // SAFETY: as in `care`.
        unsafe { &*(std::ptr::from_ref(&self.apart[..self.blocks]) as *const [u64]) }
    }
}

/// What escaping a segment adds, and what a section would write apart: CRs, and bytes in all;
/// whether escaping flags any byte of it.
struct Weighed {
    escaping: usize,
    crs: usize,
    apart: usize,
    flagged: bool,
}

/// Weighs `segment` as element content, its blocks' flags into `bits`; refuses what XML cannot
/// carry. `open`: whether a section goes on into it, which brings the `]]` before it in.
#[inline(always)]
fn weigh(
    scan: impl Mask,
    segment: &Segment<'_>,
    open: bool,
    bits: &mut Bits,
) -> Result<Weighed, Unrepresentable> {
    let &Segment {
        src,
        len,
        bytes,
        base,
    } = segment;
    let (mut apart, mut crs, mut escaping, mut flagged) = (0, 0, 0, false);
    // The `]`s of the two bytes before a block, as its top bits: a `>` at 0 or 1 ends a `]]>`
    // with them.
    let mut brackets = if open && base >= 2 {
        u64::from(bytes[base - 1] == b']') << 63 | u64::from(bytes[base - 2] == b']') << 62
    } else {
        0
    };
    for at in (0..len).step_by(BLOCK) {
        let block = block_at(src, at);
        // Clean text (most blocks of most text) is only scanned, as escaping scans it; only its
        // last two `]`s matter, to the next block.
        if scan.mask(block, Context::Text) == 0 {
            bits.push(0, 0);
            brackets = u64::from(block[BLOCK - 1] == b']') << 63
                | u64::from(block[BLOCK - 2] == b']') << 62;
            continue;
        }
        let t = scan.text_bits(block);
        flagged = true;
        let mut odd = t.odd;
        while odd != 0 {
            let j = base + at + odd.trailing_zeros() as usize;
            if refused(bytes, j) {
                return Err(Unrepresentable { offset: j });
            }
            odd &= odd - 1;
        }
        escaping += 3 * t.escaped.count_ones() as usize + t.longer.count_ones() as usize;
        let split = t.gt & (t.bracket << 1 | brackets >> 63) & (t.bracket << 2 | brackets >> 62);
        brackets = t.bracket;
        bits.push(t.escaped | t.odd, split | t.cr);
        apart += (split | t.cr).count_ones() as usize;
        crs += t.cr.count_ones() as usize;
    }
    Ok(Weighed {
        escaping,
        crs,
        apart,
        flagged,
    })
}

/// Appends `src[..real]` as element content (see `escape_segment` for `src`, `bytes` and
/// `base`): escaped, or as a CDATA section where that is shorter, its 12 bytes of markup and
/// what it writes for CRs and `]]>` against what escaping adds. `open`: whether the segment
/// before left a section open, which this one goes on or closes. Returns whether a section is
/// open after it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn content_segment(
    out: &mut Vec<u8>,
    src: &[u8],
    len: usize,
    real: usize,
    bytes: &[u8],
    base: usize,
    open: bool,
    scan: impl Mask,
) -> Result<bool, Unrepresentable> {
    debug_assert!(
        len.is_multiple_of(BLOCK) && real <= len && len <= SEGMENT && src.len() >= len + BLOCK
    );
    let mut bits = Bits::new();
    let segment = Segment {
        src,
        len,
        bytes,
        base,
    };
    let Weighed {
        escaping,
        crs,
        apart: n,
        flagged,
    } = scan.weigh(&segment, open, &mut bits)?;
    let section = (n - crs) * SECTION_SPLIT + crs * SECTION_CR;
    // An open section is closed once whichever way, so closing it is not weighed: it goes on
    // through a segment that costs it no more than escaping, and no text is longer than escaped.
    let cdata = if open {
        section <= escaping
    } else {
        SECTION_OPEN.len() + section + SECTION_CLOSE.len() < escaping
    };
    // The rest of a character the segment before began stays on the side of the switch it was.
    let lead = if base > 0 {
        src[..3.min(real)]
            .iter()
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count()
    } else {
        0
    };
    if !cdata {
        if open {
            out.extend_from_slice(&src[..lead]);
            out.extend_from_slice(SECTION_CLOSE);
        }
        let start = if open { lead } else { 0 };
        let mut found = [MaybeUninit::uninit(); SEGMENT + 8];
        let found = if flagged {
            let care = bits.care();
            listed(len, |at| care[at / BLOCK], &mut found)
        } else {
            &[]
        };
        // Every byte was checked above: this cannot fail.
        write_escaped(out, src, start, real, bytes, base, found, &TEXT_CODES)?;
        return Ok(false);
    }
    out.reserve(SECTION_OPEN.len() + real + section);
    // Each run of bytes between those written apart goes in a section, opened where it starts
    // (no empty ones); a CR closes it and follows as a reference, the `>` of a `]]>` closes it
    // and starts the next run.
    let mut open = open;
    let mut from = 0;
    if !open {
        out.extend_from_slice(&src[..lead]);
        from = lead;
    }
    let apart = bits.apart().iter().enumerate().flat_map(|(k, &bits)| {
        std::iter::successors(Some(bits), |b| Some(b & b.wrapping_sub(1)))
            .take_while(|&b| b != 0)
            .map(move |b| k * BLOCK + b.trailing_zeros() as usize)
    });
    for j in apart {
        if from < j {
            if !open {
                out.extend_from_slice(SECTION_OPEN);
            }
            out.extend_from_slice(&src[from..j]);
            open = true;
        }
        if open {
            out.extend_from_slice(SECTION_CLOSE);
            open = false;
        }
        from = if src[j] == b'\r' {
            out.extend_from_slice(CR);
            j + 1
        } else {
            j
        };
    }
    if from < real {
        if !open {
            out.extend_from_slice(SECTION_OPEN);
        }
        out.extend_from_slice(&src[from..real]);
        open = true;
    }
    Ok(open)
}

/// Runs `segment(out, src, len, real, base)` over the segments of `bytes` (see
/// `escape_segment`), but for a last one of a block or less that needs no care, appended as it
/// is.
#[inline(always)]
fn by_segments(
    out: &mut Vec<u8>,
    bytes: &[u8],
    ctx: Context,
    scan: impl Mask,
    mut segment: impl FnMut(&mut Vec<u8>, &[u8], usize, usize, usize) -> Result<(), Unrepresentable>,
) -> Result<(), Unrepresentable> {
    // The segments read from the input itself leave a block of it after them to read.
    let mut done = 0;
    while bytes.len() - done >= 2 * BLOCK {
        let len = ((bytes.len() - done - BLOCK) / BLOCK * BLOCK).min(SEGMENT);
        segment(out, &bytes[done..done + len + BLOCK], len, len, done)?;
        done += len;
    }
    // The last bytes (fewer than two blocks), padded with spaces, which need no care.
    let tail = &bytes[done..];
    let mut padded = [b' '; 3 * BLOCK];
    padded[..tail.len()].copy_from_slice(tail);
    if tail.len() <= BLOCK {
        // Most attribute values, which are short and clean, take only this.
        let block = padded[..BLOCK].try_into().expect("a block");
        if scan.mask(block, ctx) == 0 {
            out.extend_from_slice(tail);
            return Ok(());
        }
    }
    let len = tail.len().next_multiple_of(BLOCK);
    segment(out, &padded, len, tail.len(), done)
}

/// `escape_into` with the given scan, inlined into each scan's own function.
#[inline(always)]
fn escape_with(
    out: &mut Vec<u8>,
    s: &str,
    ctx: Context,
    scan: impl Mask,
) -> Result<(), Unrepresentable> {
    let bytes = s.as_bytes();
    by_segments(out, bytes, ctx, scan, |out, src, len, real, base| {
        escape_segment(out, src, len, real, bytes, base, ctx, scan)
    })
}

/// `text_into` with the given scan, inlined into each scan's own function.
#[inline(always)]
fn text_with(out: &mut Vec<u8>, s: &str, scan: impl Mask) -> Result<(), Unrepresentable> {
    let bytes = s.as_bytes();
    let mut open = false;
    by_segments(
        out,
        bytes,
        Context::Text,
        scan,
        |out, src, len, real, base| {
            open = content_segment(out, src, len, real, bytes, base, open, scan)?;
            Ok(())
        },
    )?;
    if open {
        out.extend_from_slice(SECTION_CLOSE);
    }
    Ok(())
}

/// # Safety
/// The CPU must have AVX2, BMI1 and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn escape_avx2(out: &mut Vec<u8>, s: &str, ctx: Context) -> Result<(), Unrepresentable> {
    escape_with(out, s, ctx, Avx2)
}

fn escape_baseline(out: &mut Vec<u8>, s: &str, ctx: Context) -> Result<(), Unrepresentable> {
    escape_with(out, s, ctx, Baseline)
}

/// Appends the escaped form of `s` to `out`. On error `out` may hold a partial result; callers
/// truncate it back.
#[inline]
pub fn escape_into(out: &mut Vec<u8>, s: &str, ctx: Context) -> Result<(), Unrepresentable> {
    escape_into_by(Scan::best(), out, s, ctx)
}

/// `escape_into`, scanning with `scan`, which must be one of `Scan::available`.
pub fn escape_into_by(
    scan: Scan,
    out: &mut Vec<u8>,
    s: &str,
    ctx: Context,
) -> Result<(), Unrepresentable> {
    match scan {
        #[cfg(target_arch = "x86_64")]
        Scan::Avx2 => {
            assert_eq!(Scan::best(), Scan::Avx2, "no AVX2 here");
            // SAFETY: the CPU has AVX2, BMI1 and POPCNT, just checked.
            unsafe { escape_avx2(out, s, ctx) }
        }
        _ => escape_baseline(out, s, ctx),
    }
}

/// # Safety
/// The CPU must have AVX2, BMI1 and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn text_avx2(out: &mut Vec<u8>, s: &str) -> Result<(), Unrepresentable> {
    text_with(out, s, Avx2)
}

fn text_baseline(out: &mut Vec<u8>, s: &str) -> Result<(), Unrepresentable> {
    text_with(out, s, Baseline)
}

/// Appends `s` as element content, shortest: a segment whose escapes would add more than a
/// CDATA section's markup goes as a section instead (see `content_segment`), which a parser
/// reads back as the same text. As `escape_into`, refuses what XML cannot carry, and may leave
/// a partial result on error.
#[inline]
pub fn text_into(out: &mut Vec<u8>, s: &str) -> Result<(), Unrepresentable> {
    text_into_by(Scan::best(), out, s)
}

/// `text_into`, scanning with `scan`, which must be one of `Scan::available`.
pub fn text_into_by(scan: Scan, out: &mut Vec<u8>, s: &str) -> Result<(), Unrepresentable> {
    match scan {
        #[cfg(target_arch = "x86_64")]
        Scan::Avx2 => {
            assert_eq!(Scan::best(), Scan::Avx2, "no AVX2 here");
            // SAFETY: the CPU has AVX2, BMI1 and POPCNT, just checked.
            unsafe { text_avx2(out, s) }
        }
        _ => text_baseline(out, s),
    }
}

/// Appends the attribute ` name="value"`, `value` escaped, to `out`. The value must have been
/// checked as representable (`first_unrepresentable`).
pub fn attr(out: &mut Vec<u8>, name: &str, value: &str) {
    attr_or_refuse(out, name, value).expect("checked as representable");
}

/// `attr` for a value not checked: refuses one that holds a character XML cannot carry, which
/// escaping finds (`out` then holds part of the attribute: truncate it back).
pub fn attr_or_refuse(out: &mut Vec<u8>, name: &str, value: &str) -> Result<(), Unrepresentable> {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    escape_into(out, value, Context::Attribute)?;
    out.push(b'"');
    Ok(())
}

/// Whether `s` can travel as XML text at all (see the module docs).
pub fn is_representable(s: &str) -> bool {
    first_unrepresentable(s).is_none()
}

/// The byte offset of the first character XML 1.0 cannot carry, if any. Checked on every field
/// of every record: scanned as escaping scans, a block at a time, for the bytes that start such
/// a character (flagged among others in attributes: a control, 0xEF).
pub fn first_unrepresentable(s: &str) -> Option<usize> {
    first_unrepresentable_by(Scan::best(), s)
}

/// `first_unrepresentable`, scanning with `scan`, which must be one of `Scan::available`.
pub fn first_unrepresentable_by(scan: Scan, s: &str) -> Option<usize> {
    match scan {
        #[cfg(target_arch = "x86_64")]
        Scan::Avx2 => {
            assert_eq!(Scan::best(), Scan::Avx2, "no AVX2 here");
            // SAFETY: the CPU has AVX2, BMI1 and POPCNT, just checked.
            unsafe { find_avx2(s) }
        }
        _ => find_with(s, Baseline),
    }
}

/// # Safety
/// The CPU must have AVX2, BMI1 and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn find_avx2(s: &str) -> Option<usize> {
    find_with(s, Avx2)
}

#[inline(always)]
fn find_with(s: &str, scan: impl Mask) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut padded = [b' '; BLOCK];
    for (n, piece) in bytes.chunks(BLOCK).enumerate() {
        let block = match piece.try_into() {
            Ok(block) => block,
            // The last piece padded with spaces, which need no care.
            Err(_) => {
                padded[..piece.len()].copy_from_slice(piece);
                &padded
            }
        };
        let mut mask = scan.mask(block, Context::Attribute);
        while mask != 0 {
            let at = n * BLOCK + mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let allowed = matches!(bytes[at], b'\t' | b'\n' | b'\r');
            if matches!(bytes[at], 0..0x20 | 0xEF) && !allowed && refused(bytes, at) {
                return Some(at);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Escaping as the module docs say it, a character at a time.
    fn reference(s: &str, ctx: Context) -> Result<String, Unrepresentable> {
        let attribute = ctx == Context::Attribute;
        let mut out = String::new();
        for (offset, c) in s.char_indices() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '"' if attribute => out.push_str("&quot;"),
                '\r' => out.push_str("&#13;"),
                '\n' if attribute => out.push_str("&#10;"),
                '\t' if attribute => out.push_str("&#9;"),
                '\n' | '\t' => out.push(c),
                '\0'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}' => {
                    return Err(Unrepresentable { offset })
                }
                _ => out.push(c),
            }
        }
        Ok(out)
    }

    /// Text of characters that need care, their neighbours (U+FFFD and U+FFEF share 0xEF with
    /// the forbidden ones) and plain ones, of up to `max` characters: long enough to cross blocks,
    /// or segments.
    fn hostile(max: usize) -> impl Strategy<Value = String> {
        let chars = prop::sample::select(vec![
            'a',
            ' ',
            '&',
            '<',
            '>',
            '"',
            '\'',
            ']',
            '\r',
            '\n',
            '\t',
            '\0',
            '\u{1}',
            '\u{1F}',
            '\u{7F}',
            '\u{85}',
            'é',
            '日',
            '\u{F000}',
            '\u{FFEF}',
            '\u{FFFD}',
            '\u{FFFE}',
            '\u{FFFF}',
            '\u{10FFFF}',
        ]);
        // Sparse escapes too: runs of clean text longer than a block.
        let plain = prop_oneof![4 => Just('x'), 1 => chars.clone()];
        let sparse = prop_oneof![150 => Just('x'), 1 => chars];
        prop_oneof![
            prop::collection::vec(plain, 0..max),
            prop::collection::vec(sparse, 0..max)
        ]
        .prop_map(|chars| chars.into_iter().collect())
    }

    /// Every scan this CPU runs.
    fn scans() -> impl Iterator<Item = Scan> {
        Scan::available().into_iter()
    }

    proptest! {
        #[test]
        fn escaping_matches_the_reference(s in prop_oneof![hostile(200), any::<String>()]) {
            for ctx in [Context::Text, Context::Attribute] {
                for scan in scans() {
                    prop_assert_eq!(esc_by(scan, &s, ctx), reference(&s, ctx), "{:?}", scan);
                }
                prop_assert_eq!(esc(&s, ctx), reference(&s, ctx));
            }
        }

        #[test]
        fn forbidden_characters_are_found_as_the_reference_finds_them(
            s in prop_oneof![hostile(200), any::<String>()]
        ) {
            let reference = s.char_indices().find(|&(_, c)| {
                matches!(c, '\0'..='\u{8}' | '\u{B}' | '\u{C}' | '\u{E}'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}')
            });
            for scan in scans() {
                prop_assert_eq!(first_unrepresentable_by(scan, &s), reference.map(|(i, _)| i));
            }
        }

        #[test]
        fn the_simd_scans_flag_what_the_portable_one_does(
            block in prop::collection::vec(any::<u8>(), BLOCK)
        ) {
            let block: &[u8; BLOCK] = block.as_slice().try_into().unwrap();
            for ctx in [Context::Text, Context::Attribute] {
                let portable = portable_mask(block, ctx);
                prop_assert_eq!(Baseline.mask(block, ctx), portable);
                if Scan::available().contains(&Scan::Avx2) {
                    prop_assert_eq!(Avx2.mask(block, ctx), portable);
                }
            }
            let text = portable_text_bits(block);
            prop_assert_eq!(text.escaped | text.odd, portable_mask(block, Context::Text));
            prop_assert_eq!(Baseline.text_bits(block), text);
            if Scan::available().contains(&Scan::Avx2) {
                prop_assert_eq!(Avx2.text_bits(block), text);
            }
        }
    }

    /// `content_segment` weighs escaping as 3 bytes more for each byte of `TextBits::escaped`
    /// and one more for each of `longer`: what the escapes add.
    #[test]
    fn text_bits_weigh_escapes_as_they_are_written() {
        for b in 0..=255u8 {
            let t = portable_text_bits(&[b; BLOCK]);
            let weighed = (3 * t.escaped.count_ones() + t.longer.count_ones()) / BLOCK as u32;
            let grown = match ESCAPES[usize::from(TEXT_CODES[usize::from(b)])].1 {
                0 => 0,
                len => len as u32 - 1,
            };
            assert_eq!(weighed, grown, "byte {b:#x}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Text longer than a segment, escaped in several, each listing its own escapes.
        #[test]
        fn long_text_is_escaped_across_segments(s in hostile(3 * SEGMENT)) {
            for ctx in [Context::Text, Context::Attribute] {
                for scan in scans() {
                    prop_assert_eq!(esc_by(scan, &s, ctx), reference(&s, ctx), "{:?}", scan);
                }
            }
        }
    }

    fn esc(s: &str, ctx: Context) -> Result<String, Unrepresentable> {
        let mut out = Vec::new();
        escape_into(&mut out, s, ctx).map(|()| String::from_utf8(out).unwrap())
    }

    fn esc_by(scan: Scan, s: &str, ctx: Context) -> Result<String, Unrepresentable> {
        // After bytes already there, as records are appended.
        let mut out = b"<x>".to_vec();
        escape_into_by(scan, &mut out, s, ctx)
            .map(|()| String::from_utf8(out[3..].to_vec()).unwrap())
    }

    #[test]
    fn text_keeps_tab_and_lf_and_protects_cr_and_markup() {
        assert_eq!(
            esc("a&b<c>d]]>e\r\n\tf", Context::Text).unwrap(),
            "a&amp;b&lt;c&gt;d]]&gt;e&#13;\n\tf"
        );
    }

    #[test]
    fn attributes_protect_whitespace_and_quotes() {
        assert_eq!(
            esc("a\"b'\t\n\r", Context::Attribute).unwrap(),
            "a&quot;b'&#9;&#10;&#13;"
        );
    }

    #[test]
    fn long_clean_runs_are_copied_whole() {
        let s = "héllo wörld, 日本語 ".repeat(40);
        assert_eq!(esc(&s, Context::Text).unwrap(), s);
        let dirty = format!("{s}&{s}");
        assert_eq!(esc(&dirty, Context::Text).unwrap(), format!("{s}&amp;{s}"));
    }

    #[test]
    fn forbidden_characters_are_reported_at_their_offset() {
        assert_eq!(
            esc("ab\u{1}", Context::Text),
            Err(Unrepresentable { offset: 2 })
        );
        let long = format!("{}\u{FFFF}", "x".repeat(70));
        assert_eq!(
            esc(&long, Context::Attribute),
            Err(Unrepresentable { offset: 70 })
        );
        // U+FFFD and U+FFEF share the 0xEF lead byte but are fine.
        assert_eq!(
            esc("\u{FFFD}\u{FFEF}", Context::Text).unwrap(),
            "\u{FFFD}\u{FFEF}"
        );
        assert!(!is_representable("\u{FFFE}"));
        assert!(is_representable("ok\t\r\n"));
    }

    /// Element content read back as an XML parser reads it, strictly: a section's text as it
    /// is, references resolved; panics on anything a parser would reject or rewrite (raw CR,
    /// `<` or `&` out of place, `]]>` outside a section).
    fn read_back(xml: &str) -> String {
        assert!(!xml.contains('\r'), "raw CR would become LF: {xml:?}");
        let mut out = String::new();
        let mut rest = xml;
        while let Some(c) = rest.chars().next() {
            if let Some(section) = rest.strip_prefix("<![CDATA[") {
                let end = section.find("]]>").expect("a section ends");
                out.push_str(&section[..end]);
                rest = &section[end + 3..];
            } else if c == '&' {
                let end = rest.find(';').expect("a reference ends");
                out.push(match &rest[1..end] {
                    "amp" => '&',
                    "lt" => '<',
                    "gt" => '>',
                    "#13" => '\r',
                    other => panic!("unexpected reference {other}"),
                });
                rest = &rest[end + 1..];
            } else {
                assert!(
                    c != '<' && !rest.starts_with("]]>"),
                    "markup in text: {rest:?}"
                );
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
    }

    fn text(s: &str) -> Result<String, Unrepresentable> {
        let mut outs = scans().map(|scan| {
            let mut out = b"<content>".to_vec();
            text_into_by(scan, &mut out, s).map(|()| String::from_utf8(out[9..].to_vec()).unwrap())
        });
        let first = outs.next().unwrap();
        for other in outs {
            assert_eq!(other, first, "every scan writes the same");
        }
        first
    }

    /// Text dense with markup, where sections pay, of `len` bytes (ASCII).
    fn dense(len: usize) -> String {
        "<b>x</b>&".chars().cycle().take(len).collect()
    }

    /// Text like the above, now and then with the cases sections write apart.
    fn markup(max: usize) -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "<b>",
            "</b>",
            "&",
            "]]>",
            "]]",
            "]",
            ">",
            "\r",
            "\r\n",
            "\n",
            "x",
            "plain words ",
            "日本語",
            "\u{FFFD}",
            "\u{1}",
            "\u{FFFE}",
        ]);
        let sparse = prop_oneof![40 => Just("clean text "), 1 => piece.clone()];
        prop_oneof![
            prop::collection::vec(piece, 0..max),
            prop::collection::vec(sparse, 0..max)
        ]
        .prop_map(|pieces| pieces.concat())
    }

    /// `s` as content reads back as `s`, no longer than escaped; or is refused as escaping
    /// refuses it.
    fn reads_back(s: &str) -> Result<(), TestCaseError> {
        match (text(s), reference(s, Context::Text)) {
            (Ok(out), Ok(escaped)) => {
                prop_assert_eq!(read_back(&out), s);
                prop_assert!(out.len() <= escaped.len());
            }
            (out, escaped) => prop_assert_eq!(out.map(drop), escaped.map(drop)),
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn text_reads_back_as_given_and_never_longer_than_escaped(
            s in prop_oneof![markup(100), hostile(200), any::<String>()]
        ) {
            reads_back(&s)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Across segments, whose sections go on or close.
        #[test]
        fn long_text_reads_back_as_given(s in prop_oneof![markup(1500), hostile(3 * SEGMENT)]) {
            reads_back(&s)?;
        }
    }

    /// A character across the edge of two segments, one escaped and one a section, in each
    /// order: the section's markup goes before or after it, never between its bytes (review
    /// found `<![CDATA[` written inside a character, which no parser reads).
    #[test]
    fn a_character_across_segments_is_never_cut_by_a_section() {
        let clean: String = "clean text ".chars().cycle().take(3 * SEGMENT).collect();
        let dense = dense(3 * SEGMENT);
        for c in ["é", "日", "😀"] {
            for (before, after) in [(&dense, &clean), (&clean, &dense)] {
                let edges = (100..200).chain(SEGMENT - 70..SEGMENT + 10);
                for at in edges {
                    for tail in [40, 70, 130, 300] {
                        let s = format!("{}{c}{}", &before[..at], &after[..tail]);
                        reads_back(&s).unwrap();
                    }
                }
            }
        }
    }

    #[test]
    fn a_segment_goes_as_a_section_only_when_its_escapes_add_more_than_the_markup() {
        // Four escapes of 3 bytes add 12, the section's markup: escaped.
        assert_eq!(text("<<>> text").unwrap(), "&lt;&lt;&gt;&gt; text");
        // One more byte of escapes: a section.
        assert_eq!(text("<<>& text").unwrap(), "<![CDATA[<<>& text]]>");
        assert_eq!(text("a & b").unwrap(), "a &amp; b");
        assert_eq!(text("plain").unwrap(), "plain");
        assert_eq!(text("").unwrap(), "");
    }

    /// `text` writes each input as the content given beside it.
    fn writes(cases: &[(&str, &str)]) {
        for &(input, content) in cases {
            assert_eq!(text(input).unwrap(), content, "{input:?}");
            assert_eq!(read_back(content), input);
        }
    }

    #[test]
    fn cr_goes_outside_a_section_as_a_reference() {
        writes(&[
            (
                "<b>x</b><i>y</i><b>\r\n</b>",
                "<![CDATA[<b>x</b><i>y</i><b>]]>&#13;<![CDATA[\n</b>]]>",
            ),
            // No section is opened to hold nothing.
            (
                "\r<b>x</b><i>y</i><b></b><i></i><b></b>\r\r",
                "&#13;<![CDATA[<b>x</b><i>y</i><b></b><i></i><b></b>]]>&#13;&#13;",
            ),
            // Where the references and the sections' markup cost more than escaping: escaped.
            ("<b>\r\n</b>\r\n", "&lt;b&gt;&#13;\n&lt;/b&gt;&#13;\n"),
        ]);
    }

    #[test]
    fn a_section_splits_every_end_marker_in_it() {
        writes(&[
            (
                "]]><b>x</b><b>y</b>",
                "<![CDATA[]]]]><![CDATA[><b>x</b><b>y</b>]]>",
            ),
            (
                "<b>x</b><b>y</b>]]>",
                "<![CDATA[<b>x</b><b>y</b>]]]]><![CDATA[>]]>",
            ),
            // Brackets that end the text stay in the section, before the one that ends it.
            ("<b>x</b><b>y</b>]]", "<![CDATA[<b>x</b><b>y</b>]]]]>"),
        ]);
    }

    #[test]
    fn an_end_marker_across_segments_is_split_when_one_section_holds_it() {
        // The first segment of a long text is SEGMENT bytes: `]]` ends it, or `]` does, and
        // the next, in the same section, starts with the rest.
        for brackets in ["]]", "]"] {
            let s = format!(
                "{}{brackets}{}{}",
                dense(SEGMENT - brackets.len()),
                &"]]>"[brackets.len()..],
                dense(SEGMENT)
            );
            let out = text(&s).unwrap();
            assert_eq!(read_back(&out), s);
            assert!(out.contains("]]]]><![CDATA[>"), "{brackets}");
            assert_eq!(
                out.matches("<![CDATA[").count(),
                2,
                "one section, split once"
            );
        }
    }

    #[test]
    fn an_end_marker_across_blocks_within_a_section_is_split() {
        // `]]>` with its brackets ending a block and the rest starting the next, in a segment
        // that goes as a section: the block before clean (the brackets its only flags) or not.
        for edge in [BLOCK, 2 * BLOCK, 3 * BLOCK] {
            for brackets in ["]]", "]"] {
                for before in ["a", "<b>x</b>&"] {
                    let head: String = before.chars().cycle().take(edge - brackets.len()).collect();
                    let s = format!("{head}]]>{}", dense(200));
                    let out = text(&s).unwrap();
                    assert!(out.starts_with("<![CDATA["), "{edge} {brackets} {before}");
                    assert_eq!(read_back(&out), s, "{edge} {brackets} {before}");
                }
            }
        }
    }

    #[test]
    fn an_end_marker_whose_brackets_are_escaped_is_not_split() {
        // The first segment has too few escapes for a section: its brackets are text, and the
        // next segment's section starts with the `>`.
        let s = format!("{}]]>{}", "x".repeat(SEGMENT - 2), dense(SEGMENT));
        let out = text(&s).unwrap();
        assert_eq!(read_back(&out), s);
        assert!(out.contains("]]<![CDATA[>"));
        assert_eq!(out.matches("<![CDATA[").count(), 1);
    }

    #[test]
    fn a_section_goes_on_across_segments_and_closes_where_escaping_is_shorter() {
        let s = format!("{}{}", dense(2 * SEGMENT), "&".repeat(40));
        let out = text(&s).unwrap();
        assert_eq!(out.matches("<![CDATA[").count(), 1);
        assert_eq!(read_back(&out), s);
        // The second segment's CR costs a section more than escaping it.
        let clean = "x".repeat(SEGMENT + 200 - 1);
        let s = format!("{}\r{clean}", dense(SEGMENT));
        assert_eq!(
            text(&s).unwrap(),
            format!("<![CDATA[{}]]>&#13;{clean}", dense(SEGMENT))
        );
    }

    #[test]
    fn text_refuses_what_xml_cannot_carry_as_escaping_does() {
        for s in [
            format!("{}\u{1}", dense(100)),
            format!("{}\u{FFFF}{}", dense(SEGMENT + 10), dense(100)),
            "a\u{0}b".to_string(),
        ] {
            let refused = reference(&s, Context::Text).map(drop);
            assert!(refused.is_err());
            assert_eq!(text(&s).map(drop), refused);
        }
    }
}
