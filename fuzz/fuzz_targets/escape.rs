//! Escaped text is read back by an XML parser as the text that was escaped, in element
//! content and in attributes; text XML cannot carry is refused, never written. Every scan the
//! CPU runs (SSE2, AVX2) escapes alike.
#![no_main]

use fastfeed_core::escape::{escape_into_by, first_unrepresentable_by, Context, Scan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let scans = Scan::available();
    let refused = first_unrepresentable_by(scans[0], text);
    for &scan in &scans[1..] {
        assert_eq!(first_unrepresentable_by(scan, text), refused, "{scan:?}");
    }
    for ctx in [Context::Text, Context::Attribute] {
        let escaped: Vec<_> = scans
            .iter()
            .map(|&scan| {
                let mut out = Vec::new();
                escape_into_by(scan, &mut out, text, ctx).map(|()| out)
            })
            .collect();
        for (scan, other) in scans.iter().zip(&escaped).skip(1) {
            assert_eq!(other, &escaped[0], "{scan:?}");
        }
        let Ok(out) = &escaped[0] else {
            continue;
        };
        let escaped = std::str::from_utf8(out).expect("escaping keeps UTF-8");
        let back = quick_xml::escape::unescape(escaped).expect("escaped text unescapes");
        // XML parsers normalise CR and attribute white space only when they read a document;
        // unescaping the text alone must give back exactly what was escaped.
        assert_eq!(back, text);
    }
});
