//! Escaped text is read back by an XML parser as the text that was escaped, in element
//! content and in attributes; text XML cannot carry is refused, never written.
#![no_main]

use fastfeed_core::escape::{escape_into, Context};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    for ctx in [Context::Text, Context::Attribute] {
        let mut out = Vec::new();
        if escape_into(&mut out, text, ctx).is_err() {
            continue;
        }
        let escaped = std::str::from_utf8(&out).expect("escaping keeps UTF-8");
        let back = quick_xml::escape::unescape(escaped).expect("escaped text unescapes");
        // XML parsers normalise CR and attribute white space only when they read a document;
        // unescaping the text alone must give back exactly what was escaped.
        assert_eq!(back, text);
    }
});
