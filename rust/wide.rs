//! Text in the fixed-width forms a Python `str` stores it in, made UTF-8 on a worker thread.
//!
//! Asking Python for a non-ASCII string's UTF-8 makes it encode and allocate a copy while the
//! GIL is held, which was a quarter of the batch API's time. A `str`'s own code units are read
//! instead, and converted here without the GIL, on the encoding threads.

/// Code units of a text: Latin-1, UCS-2 or UCS-4, as PEP 393 stores a `str`.
#[derive(Clone, Copy, Debug)]
pub enum Wide<'a> {
    Latin1(&'a [u8]),
    Ucs2(&'a [u16]),
    Ucs4(&'a [u32]),
}

impl<'a> Wide<'a> {
    /// Its length in code units (characters).
    pub fn units(&self) -> usize {
        match self {
            Wide::Latin1(u) => u.len(),
            Wide::Ucs2(u) => u.len(),
            Wide::Ucs4(u) => u.len(),
        }
    }

    /// The most bytes its UTF-8 form can take.
    fn max_utf8_len(&self) -> usize {
        match self {
            Wide::Latin1(u) => u.len() * 2,
            Wide::Ucs2(u) => u.len() * 3,
            Wide::Ucs4(u) => u.len() * 4,
        }
    }

    /// Whether it holds a surrogate code point, which a `str` may hold but UTF-8 cannot. A
    /// quick scan, for refusing such a text where it is read, in record order.
    pub fn has_surrogate(&self) -> bool {
        fn any_in(units: impl Iterator<Item = u32>) -> bool {
            units.fold(false, |seen, u| seen | (u & 0xFFFF_F800 == 0xD800))
        }
        match *self {
            Wide::Latin1(_) => false,
            Wide::Ucs2(u) => any_in(u.iter().map(|&u| u32::from(u))),
            Wide::Ucs4(u) => any_in(u.iter().copied()),
        }
    }

    /// The text itself when it is ASCII, which is already UTF-8.
    pub fn ascii(&self) -> Option<&'a str> {
        match *self {
            Wide::Latin1(u) if u.is_ascii() => std::str::from_utf8(u).ok(),
            _ => None,
        }
    }

    /// Writes the UTF-8 form into `out` (cleared first). A surrogate code point, which a `str`
    /// may hold but UTF-8 cannot, is refused with its position in the text.
    pub fn to_utf8<'o>(&self, out: &'o mut Vec<u8>) -> Result<&'o str, usize> {
        out.clear();
        out.reserve(self.max_utf8_len());
        match *self {
            Wide::Latin1(units) => units.iter().for_each(|&u| push(out, u32::from(u))),
            Wide::Ucs2(units) => encode(units.iter().map(|&u| u32::from(u)), out)?,
            Wide::Ucs4(units) => encode(units.iter().copied(), out)?,
        }
        // SAFETY: `push` writes only the UTF-8 encodings of scalar values.
        Ok(unsafe { std::str::from_utf8_unchecked(out) })
    }
}

fn encode(units: impl Iterator<Item = u32>, out: &mut Vec<u8>) -> Result<(), usize> {
    for (at, u) in units.enumerate() {
        if (0xD800..0xE000).contains(&u) || u > 0x10FFFF {
            return Err(at);
        }
        push(out, u);
    }
    Ok(())
}

/// Appends the UTF-8 encoding of `u`, a Unicode scalar value.
#[inline(always)]
fn push(out: &mut Vec<u8>, u: u32) {
    if u < 0x80 {
        out.push(u as u8);
    } else if u < 0x800 {
        out.extend_from_slice(&[0xC0 | (u >> 6) as u8, 0x80 | (u & 0x3F) as u8]);
    } else if u < 0x10000 {
        out.extend_from_slice(&[
            0xE0 | (u >> 12) as u8,
            0x80 | ((u >> 6) & 0x3F) as u8,
            0x80 | (u & 0x3F) as u8,
        ]);
    } else {
        out.extend_from_slice(&[
            0xF0 | (u >> 18) as u8,
            0x80 | ((u >> 12) & 0x3F) as u8,
            0x80 | ((u >> 6) & 0x3F) as u8,
            0x80 | (u & 0x3F) as u8,
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn any_text_in_any_width_gives_its_utf8(s in "(?s).{0,64}") {
            let ucs4: Vec<u32> = s.chars().map(u32::from).collect();
            let mut out = Vec::new();
            proptest::prop_assert_eq!(Wide::Ucs4(&ucs4).to_utf8(&mut out), Ok(s.as_str()));
            if ucs4.iter().all(|&u| u < 0x10000) {
                let ucs2: Vec<u16> = ucs4.iter().map(|&u| u as u16).collect();
                proptest::prop_assert_eq!(Wide::Ucs2(&ucs2).to_utf8(&mut out), Ok(s.as_str()));
            }
            if ucs4.iter().all(|&u| u < 0x100) {
                let latin1: Vec<u8> = ucs4.iter().map(|&u| u as u8).collect();
                proptest::prop_assert_eq!(Wide::Latin1(&latin1).to_utf8(&mut out), Ok(s.as_str()));
            }
        }
    }

    #[test]
    fn surrogates_are_refused_where_they_stand() {
        let mut out = Vec::new();
        assert_eq!(
            Wide::Ucs2(&[0x61, 0xD83D, 0xDE00]).to_utf8(&mut out),
            Err(1)
        );
        assert_eq!(Wide::Ucs4(&[0x61, 0x62, 0xDFFF]).to_utf8(&mut out), Err(2));
        assert!(Wide::Ucs2(&[0x61, 0xD83D]).has_surrogate());
        assert!(Wide::Ucs4(&[0x1F600, 0xDFFF]).has_surrogate());
        assert!(!Wide::Ucs2(&[0x61, 0xD7FF, 0xE000]).has_surrogate());
        assert!(!Wide::Ucs4(&[0x1F600, 0x10FFFF]).has_surrogate());
        assert_eq!(Wide::Latin1(b"ab").ascii(), Some("ab"));
        assert_eq!(Wide::Latin1(b"\xe9").ascii(), None);
    }
}
