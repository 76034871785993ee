//! XML escaping that round-trips exactly.
//!
//! A parser hands the receiver back the very characters we were given: `&`, `<`, `>` become
//! entities, and the characters that XML would silently rewrite become character references
//! (CR in text, which end-of-line handling turns into LF; TAB, LF and CR in attribute values,
//! which attribute-value normalisation turns into spaces). Characters that XML 1.0 cannot carry at
//! all (C0 controls other than TAB/LF/CR, U+FFFE, U+FFFF) make escaping fail, so the caller can
//! switch to base64 instead of dropping them.
//!
//! Clean input dominates real corpora, so the scan checks 32 bytes at a time with plain
//! comparisons the compiler turns into SIMD, and copies clean runs in one go.

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

#[inline(always)]
fn needs_care(b: u8, ctx: Context) -> bool {
    let control = match ctx {
        Context::Text => b < 0x20 && b != b'\n' && b != b'\t',
        Context::Attribute => b < 0x20,
    };
    // 0xEF leads U+F000..U+FFFF, which includes the two forbidden noncharacters.
    let quote = ctx == Context::Attribute && b == b'"';
    control | quote | (b == b'&') | (b == b'<') | (b == b'>') | (b == 0xEF)
}

#[inline(always)]
fn chunk_is_clean(chunk: &[u8], ctx: Context) -> bool {
    // A fold with no early exit, so that it vectorises: most chunks of real text are clean.
    !chunk
        .iter()
        .fold(false, |dirty, &b| dirty | needs_care(b, ctx))
}

/// One bit per byte of a dirty chunk that needs a look, so that only those are visited.
#[inline(always)]
fn chunk_mask(chunk: &[u8; CHUNK], ctx: Context) -> u32 {
    let mut mask = 0u32;
    for (j, &b) in chunk.iter().enumerate() {
        mask |= u32::from(needs_care(b, ctx)) << j;
    }
    mask
}

/// What a byte flagged by `needs_care` becomes: `Ok(None)` when it turns out to be fine.
#[inline(always)]
fn replacement(
    bytes: &[u8],
    i: usize,
    ctx: Context,
) -> Result<Option<&'static [u8]>, Unrepresentable> {
    Ok(Some(match bytes[i] {
        b'&' => b"&amp;",
        b'<' => b"&lt;",
        b'>' => b"&gt;",
        b'"' => b"&quot;",
        b'\r' => b"&#13;",
        b'\n' if ctx == Context::Attribute => b"&#10;",
        b'\t' if ctx == Context::Attribute => b"&#9;",
        b'\n' | b'\t' => return Ok(None),
        0x00..=0x1F => return Err(Unrepresentable { offset: i }),
        0xEF if bytes.get(i + 1) == Some(&0xBF)
            && matches!(bytes.get(i + 2), Some(0xBE | 0xBF)) =>
        {
            return Err(Unrepresentable { offset: i })
        }
        _ => return Ok(None),
    }))
}

/// Appends the escaped form of `s` to `out`. On error `out` may hold a partial result; callers
/// truncate it back.
pub fn escape_into(out: &mut Vec<u8>, s: &str, ctx: Context) -> Result<(), Unrepresentable> {
    let bytes = s.as_bytes();
    out.reserve(bytes.len());
    let mut run_start = 0;
    let mut emit = |out: &mut Vec<u8>, i: usize| -> Result<(), Unrepresentable> {
        if let Some(rep) = replacement(bytes, i, ctx)? {
            out.extend_from_slice(&bytes[run_start..i]);
            out.extend_from_slice(rep);
            run_start = i + 1;
        }
        Ok(())
    };
    let mut chunks = bytes.chunks_exact(CHUNK);
    let mut base = 0;
    for chunk in &mut chunks {
        if chunk_is_clean(chunk, ctx) {
            base += CHUNK;
            continue;
        }
        let mut mask = chunk_mask(chunk.try_into().expect("exact chunk"), ctx);
        while mask != 0 {
            emit(out, base + mask.trailing_zeros() as usize)?;
            mask &= mask - 1;
        }
        base += CHUNK;
    }
    for (i, &b) in bytes.iter().enumerate().skip(base) {
        if needs_care(b, ctx) {
            emit(out, i)?;
        }
    }
    out.extend_from_slice(&bytes[run_start..]);
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

/// The byte offset of the first character XML 1.0 cannot carry, if any.
pub fn first_unrepresentable(s: &str) -> Option<usize> {
    s.char_indices()
        .find(|&(_, c)| {
            matches!(c, '\u{0}'..='\u{8}' | '\u{B}' | '\u{C}' | '\u{E}'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}')
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

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
