//! Reads the long strings of a JSON Lines record (its content) at memory speed.
//!
//! serde_json reads a string a few bytes at a time, and a record's content is nearly all of its
//! bytes. So the top-level `content` and `content_base64` strings are lifted out of the line
//! here: found with SIMD searches, checked with a SIMD UTF-8 validator, and borrowed when they
//! hold no escape. serde then reads what is left of the line, where they stand as `null`.
//!
//! Anything unusual (a line that is not a well-formed object as far as this scan sees, a raw
//! control character, invalid UTF-8, a bad escape) lifts nothing: serde then reads the whole line
//! as before and names what is wrong, so errors do not depend on this shortcut.

use std::borrow::Cow;
use std::ops::Range;

use memchr::{memchr, memchr2};

/// Strings shorter than this are left to serde: lifting costs a copy of the rest of the line.
const MIN_LIFT: usize = 256;

/// A line with its long content strings lifted out.
pub struct Lifted<'a> {
    /// The line with each lifted string replaced by `null`.
    pub rest: Vec<u8>,
    pub content: Option<Cow<'a, str>>,
    pub content_base64: Option<Cow<'a, str>>,
}

/// A long content string found in a line.
struct Found {
    base64: bool,
    /// The value, quotes included, which `null` replaces.
    value: Range<usize>,
    /// Between the quotes.
    body: Range<usize>,
    escaped: bool,
}

/// Lifts the long top-level `content` and `content_base64` strings out of `line`, or returns
/// None when there are none or serde should read the whole line.
pub fn lift(line: &[u8]) -> Option<Lifted<'_>> {
    let mut scan = Scan { b: line, i: 0 };
    let mut found = Vec::new();
    scan.ws();
    scan.eat(b'{')?;
    scan.ws();
    if scan.peek()? == b'}' {
        return None;
    }
    loop {
        let (key_start, key_end, _) = scan.string()?;
        let key = &line[key_start..key_end];
        scan.ws();
        scan.eat(b':')?;
        scan.ws();
        let start = scan.i;
        let hot = key == b"content" || key == b"content_base64";
        if hot && scan.peek()? == b'"' {
            let (body_start, body_end, escaped) = scan.string()?;
            if body_end - body_start >= MIN_LIFT {
                found.push(Found {
                    base64: key == b"content_base64",
                    value: start..scan.i,
                    body: body_start..body_end,
                    escaped,
                });
            }
        } else {
            scan.value()?;
        }
        scan.ws();
        match scan.peek()? {
            b',' => {
                scan.i += 1;
                scan.ws();
            }
            b'}' => break,
            _ => return None,
        }
    }
    if found.is_empty() {
        return None;
    }
    let lifted_len: usize = found.iter().map(|f| f.value.len()).sum();
    let mut lifted = Lifted {
        rest: Vec::with_capacity(line.len() - lifted_len + 4 * found.len()),
        content: None,
        content_base64: None,
    };
    let mut copied = 0;
    for f in found {
        let text = string_value(&line[f.body], f.escaped)?;
        let slot = if f.base64 {
            &mut lifted.content_base64
        } else {
            &mut lifted.content
        };
        // A repeated field: serde will refuse the line for it, as it would without lifting.
        if slot.is_none() {
            *slot = Some(text);
        }
        lifted.rest.extend_from_slice(&line[copied..f.value.start]);
        lifted.rest.extend_from_slice(b"null");
        copied = f.value.end;
    }
    lifted.rest.extend_from_slice(&line[copied..]);
    Some(lifted)
}

/// A JSON string's body as text: borrowed when it has no escapes. None when JSON does not allow
/// it (raw control characters, invalid UTF-8, bad escapes).
fn string_value(body: &[u8], escaped: bool) -> Option<Cow<'_, str>> {
    if has_control(body) {
        return None;
    }
    let text = simdutf8::basic::from_utf8(body).ok()?;
    if escaped {
        unescape(text).map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(text))
    }
}

/// Whether `s` holds a byte below 0x20, which JSON strings must escape. Written to vectorize.
fn has_control(s: &[u8]) -> bool {
    let mut chunks = s.chunks_exact(64);
    let found = chunks
        .by_ref()
        .any(|c| c.iter().fold(false, |seen, &b| seen | (b < 0x20)));
    found || chunks.remainder().iter().any(|&b| b < 0x20)
}

/// Resolves the escapes of a JSON string body (valid UTF-8, no raw control characters).
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(k) = memchr(b'\\', &b[i..]).map(|k| i + k) {
        out.push_str(&s[i..k]);
        let (c, len) = match *b.get(k + 1)? {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => {
                let hi = hex4(b.get(k + 2..k + 6)?)?;
                if (0xD800..0xDC00).contains(&hi) {
                    // A surrogate pair: the low half must follow as its own escape.
                    if b.get(k + 6..k + 8)? != b"\\u" {
                        return None;
                    }
                    let lo = hex4(b.get(k + 8..k + 12)?)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return None;
                    }
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    (char::from_u32(c)?, 12)
                } else {
                    (char::from_u32(hi)?, 6)
                }
            }
            _ => return None,
        };
        out.push(c);
        i = k + len;
    }
    out.push_str(&s[i..]);
    Some(out)
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits).ok()?;
    if !text.bytes().all(|d| d.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

/// A cursor over a line, which skips JSON values without reading them.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Skips a string, the cursor on its opening quote; returns its body's span and whether it
    /// holds escapes.
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let k = self.i + memchr2(b'"', b'\\', &self.b[self.i..])?;
            if self.b[k] == b'"' {
                self.i = k + 1;
                return Some((start, k, escaped));
            }
            escaped = true;
            // The escaped character, which may be a quote; \u's digits need no care.
            self.i = k + 2;
            if self.i > self.b.len() {
                return None;
            }
        }
    }

    /// Skips any value: serde checks it later, this only needs to find where it ends.
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                let len = self.b[self.i..]
                    .iter()
                    .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))?;
                (len > 0).then(|| self.i += len)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(c: char) -> String {
        std::iter::repeat_n(c, MIN_LIFT).collect()
    }

    #[test]
    fn lifts_long_contents_and_leaves_null() {
        let body = long('x');
        let line = format!(r#"{{"url":"u","metadata":{{"a":["}}"]}},"content": "{body}" }}"#);
        let lifted = lift(line.as_bytes()).unwrap();
        assert!(matches!(lifted.content, Some(Cow::Borrowed(s)) if s == body));
        assert_eq!(
            lifted.rest,
            br#"{"url":"u","metadata":{"a":["}"]},"content": null }"#
        );
    }

    #[test]
    fn resolves_escapes_like_json() {
        let body = format!(r#"{}\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"#, long('y'));
        let line = format!(r#"{{"content_base64":"{body}","url":"u"}}"#);
        let lifted = lift(line.as_bytes()).unwrap();
        let expected: String = serde_json::from_str(&format!("\"{body}\"")).unwrap();
        assert_eq!(lifted.content_base64.unwrap(), expected);
        assert_eq!(lifted.rest, br#"{"content_base64":null,"url":"u"}"#);
    }

    proptest::proptest! {
        #[test]
        fn reads_any_string_as_serde_does(s in "(?s).{0,64}", pad in 0..300usize, ascii in proptest::bool::ANY) {
            let text = format!("{}{s}", "p".repeat(pad));
            let mut json = serde_json::to_string(&text).unwrap();
            if ascii {
                // serde writes non-ASCII as is; encoders that escape it give \u escapes.
                json = text.chars().fold(String::from("\""), |mut out, c| {
                    match c {
                        '"' | '\\' => { out.push('\\'); out.push(c) }
                        c if c.is_ascii() && c >= ' ' => out.push(c),
                        c => {
                            let mut units = [0u16; 2];
                            for u in c.encode_utf16(&mut units) {
                                out.push_str(&format!("\\u{u:04x}"));
                            }
                        }
                    }
                    out
                }) + "\"";
            }
            let line = format!(r#"{{"url":"u","content":{json}}}"#);
            match lift(line.as_bytes()) {
                Some(lifted) => proptest::prop_assert_eq!(lifted.content.unwrap(), text),
                None => proptest::prop_assert!(json.len() - 2 < MIN_LIFT),
            }
        }
    }

    #[test]
    fn leaves_to_serde_what_it_must_judge() {
        let body = long('z');
        for bad in [
            format!(r#"{{"content":"{body}\u0007"}}"#).replace("\\u0007", "\u{7}"),
            format!(r#"{{"content":"{body}\ud800"}}"#),
            format!(r#"{{"content":"{body}\q"}}"#),
            format!(r#"{{"content":"{body}""#),
            format!(r#"{{"content":"{body}" "url":"u"}}"#),
            format!(r#"["content","{body}"]"#),
            r#"{"content":"short"}"#.to_string(),
            format!(r#"{{"content":1,"url":"{body}"}}"#),
        ] {
            assert!(lift(bad.as_bytes()).is_none(), "{bad}");
        }
        let mut invalid = format!(r#"{{"content":"{body}"#).into_bytes();
        invalid.extend_from_slice(b"\xff\"}");
        assert!(lift(&invalid).is_none());
    }
}
