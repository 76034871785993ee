//! XML escaping that round-trips exactly.
//!
//! A parser hands the receiver back the very characters we were given: `&`, `<`, `>` become
//! entities, and the characters that XML would silently rewrite become character references
//! (CR in text, which end-of-line handling turns into LF; TAB, LF and CR in attribute values,
//! which attribute-value normalisation turns into spaces). Characters that XML 1.0 cannot carry at
//! all (C0 controls other than TAB/LF/CR, U+FFFE, U+FFFF) make escaping fail, so the caller can
//! switch to base64 instead of dropping them.
//!
//! Clean input dominates real corpora, so the scan flags the bytes that need a look 32 at a time
//! (SSE2 compares on x86_64, part of its baseline) and copies clean chunks whole. A chunk with
//! flagged bytes is escaped in place in the output, with copies of fixed size and a table of
//! escapes: markup-dense text costs a few instructions per escape, not calls to `memcpy`.

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

const CHUNK: usize = 32;

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

/// One bit per byte of `chunk` that `needs_care`.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn portable_mask(chunk: &[u8; CHUNK], ctx: Context) -> u32 {
    let mut mask = 0u32;
    for (j, &b) in chunk.iter().enumerate() {
        mask |= u32::from(needs_care(b, ctx)) << j;
    }
    mask
}

#[cfg(not(target_arch = "x86_64"))]
use portable_mask as chunk_mask;

/// One bit per byte of `chunk` that needs a look, as `needs_care` says, by SSE2 compares.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn chunk_mask(chunk: &[u8; CHUNK], ctx: Context) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_andnot_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8,
        _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline, so its intrinsics are always there; the
    // loads read the two 16-byte halves of a 32-byte array, unaligned.
    unsafe {
        let half = |v: __m128i| {
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
            _mm_movemask_epi8(_mm_or_si128(markup, care)) as u16 as u32
        };
        let low = _mm_loadu_si128(chunk.as_ptr().cast());
        let high = _mm_loadu_si128(chunk.as_ptr().add(16).cast());
        half(low) | (half(high) << 16)
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

/// Room for a chunk's escaped form (at most 6 bytes a byte) and the overshoot of a copy of
/// fixed size.
const ROOM: usize = 7 * CHUNK;

/// Writes the escaped form of `src[..len]`, the chunk at `base` in `bytes` followed by as many
/// bytes of slack, at the start of `dst`; returns its length. `mask` flags the bytes to look at, `codes` says
/// their escapes.
#[inline(always)]
fn escape_chunk(
    dst: &mut [u8; ROOM],
    bytes: &[u8],
    base: usize,
    src: &[u8; 2 * CHUNK],
    len: usize,
    mut mask: u32,
    codes: &[u8; 256],
) -> Result<usize, Unrepresentable> {
    // `from`: the first byte of the chunk not yet copied; `at`: the length written. Each copy
    // is of a fixed size, without a call: what lands past its run is overwritten by what
    // follows, and cut off at the end.
    let (mut from, mut at) = (0, 0);
    while mask != 0 {
        let j = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let code = codes[usize::from(src[j])];
        if code == 0 {
            if refused(bytes, base + j) {
                return Err(Unrepresentable { offset: base + j });
            }
            continue;
        }
        let Escape(padded, n) = &ESCAPES[usize::from(code)];
        dst[at..at + CHUNK].copy_from_slice(&src[from..from + CHUNK]);
        at += j - from;
        dst[at..at + 8].copy_from_slice(padded);
        at += n;
        from = j + 1;
    }
    dst[at..at + CHUNK].copy_from_slice(&src[from..from + CHUNK]);
    Ok(at + len - from)
}

/// The room at `at` in `out` for a chunk's escaped form. `out` is grown, zeroed, ahead of the
/// writing by the `rest` of the input at a time: a chunk is then written in place, without a
/// `memset` of its own.
#[inline(always)]
fn room(out: &mut Vec<u8>, at: usize, rest: usize) -> &mut [u8; ROOM] {
    if out.len() < at + ROOM {
        out.resize(at + ROOM + rest, 0);
    }
    (&mut out[at..at + ROOM])
        .try_into()
        .expect("room for a chunk")
}

/// Appends the escaped form of `s` to `out`. On error `out` may hold a partial result; callers
/// truncate it back.
pub fn escape_into(out: &mut Vec<u8>, s: &str, ctx: Context) -> Result<(), Unrepresentable> {
    let bytes = s.as_bytes();
    let codes = match ctx {
        Context::Text => &TEXT_CODES,
        Context::Attribute => &ATTRIBUTE_CODES,
    };
    // The chunk being escaped, and slack for the copies of fixed size.
    let mut src = [0; 2 * CHUNK];
    // Where the escaped text ends in `out`, which holds zeroed room beyond.
    let mut at = out.len();
    let mut chunks = bytes.chunks_exact(CHUNK);
    let mut base = 0;
    for chunk in &mut chunks {
        let chunk: &[u8; CHUNK] = chunk.try_into().expect("an exact chunk");
        let mask = chunk_mask(chunk, ctx);
        let dst = room(out, at, bytes.len() - base);
        if mask == 0 {
            dst[..CHUNK].copy_from_slice(chunk);
            at += CHUNK;
        } else {
            // The chunk and the next one, where there is a next: copied to `src`, the chunk would
            // be read back in pieces that straddle its stores, which stalls each read.
            let window = match bytes.get(base..base + 2 * CHUNK) {
                Some(window) => window.try_into().expect("two chunks"),
                None => {
                    src[..CHUNK].copy_from_slice(chunk);
                    &src
                }
            };
            at += escape_chunk(dst, bytes, base, window, CHUNK, mask, codes)?;
        }
        base += CHUNK;
    }
    out.truncate(at);
    let tail = chunks.remainder();
    // Padded with spaces, which need no care, to be scanned as a chunk.
    src[..tail.len()].copy_from_slice(tail);
    src[tail.len()..CHUNK].fill(b' ');
    let last: &[u8; CHUNK] = src[..CHUNK].try_into().expect("a chunk");
    match chunk_mask(last, ctx) {
        // Most attribute values, which are short and clean, take only this.
        0 => out.extend_from_slice(tail),
        mask => {
            let written =
                escape_chunk(room(out, at, 0), bytes, base, &src, tail.len(), mask, codes)?;
            out.truncate(at + written);
        }
    }
    Ok(())
}

/// Appends the attribute ` name="value"`, `value` escaped, to `out`. The value must have been
/// checked as representable (`first_unrepresentable`).
pub fn attr(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    escape_into(out, value, Context::Attribute).expect("checked as representable");
    out.push(b'"');
}

/// Whether `s` can travel as XML text at all (see the module docs).
pub fn is_representable(s: &str) -> bool {
    first_unrepresentable(s).is_none()
}

/// The byte offset of the first character XML 1.0 cannot carry, if any. Checked on every field
/// of every record: scanned as escaping scans, a chunk at a time, for the bytes that start such
/// a character (flagged among others in attributes: a control, 0xEF).
pub fn first_unrepresentable(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut chunk = [b' '; CHUNK];
    for (n, piece) in bytes.chunks(CHUNK).enumerate() {
        // The last piece padded with spaces, which need no care.
        chunk[..piece.len()].copy_from_slice(piece);
        chunk[piece.len()..].fill(b' ');
        let mut mask = chunk_mask(&chunk, Context::Attribute);
        while mask != 0 {
            let at = n * CHUNK + mask.trailing_zeros() as usize;
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
    /// the forbidden ones) and plain ones, long enough to cross chunks.
    fn hostile() -> impl Strategy<Value = String> {
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
        prop::collection::vec(prop_oneof![4 => Just('x'), 1 => chars], 0..200)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn escaping_matches_the_reference(s in prop_oneof![hostile(), any::<String>()]) {
            for ctx in [Context::Text, Context::Attribute] {
                prop_assert_eq!(esc(&s, ctx), reference(&s, ctx));
            }
        }

        #[test]
        fn forbidden_characters_are_found_as_the_reference_finds_them(
            s in prop_oneof![hostile(), any::<String>()]
        ) {
            let reference = s.char_indices().find(|&(_, c)| {
                matches!(c, '\0'..='\u{8}' | '\u{B}' | '\u{C}' | '\u{E}'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}')
            });
            prop_assert_eq!(first_unrepresentable(&s), reference.map(|(i, _)| i));
        }

        #[test]
        fn the_simd_scan_flags_what_the_portable_one_does(chunk in any::<[u8; CHUNK]>()) {
            for ctx in [Context::Text, Context::Attribute] {
                prop_assert_eq!(chunk_mask(&chunk, ctx), portable_mask(&chunk, ctx));
            }
        }
    }

    fn esc(s: &str, ctx: Context) -> Result<String, Unrepresentable> {
        let mut out = Vec::new();
        escape_into(&mut out, s, ctx).map(|()| String::from_utf8(out).unwrap())
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
}
