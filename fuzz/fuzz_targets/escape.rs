//! Escaped text is read back by an XML parser as the text that was escaped, in element
//! content and in attributes, and so is content written in CDATA sections where they are
//! shorter; text XML cannot carry is refused, never written. Every scan the CPU runs (SSE2,
//! AVX2) writes alike.
#![no_main]

use fastfeed_core::escape::{
    escape_into_by, first_unrepresentable_by, text_into_by, Context, Scan,
};
use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;
use quick_xml::Reader;

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
    let written: Vec<_> = scans
        .iter()
        .map(|&scan| {
            let mut out = b"<content>".to_vec();
            text_into_by(scan, &mut out, text).map(|()| out)
        })
        .collect();
    for (scan, other) in scans.iter().zip(&written).skip(1) {
        assert_eq!(other, &written[0], "{scan:?}");
    }
    let Some(mut xml) = written.into_iter().next().and_then(Result::ok) else {
        assert!(refused.is_some(), "text refused though XML carries it");
        return;
    };
    assert!(refused.is_none(), "text XML cannot carry written");
    assert!(!xml.contains(&b'\r'), "a raw CR would be read as LF");
    xml.extend_from_slice(b"</content>");
    assert_eq!(read_content(&xml), text);
});

/// The text of a `<content>` element, as an XML parser reads it.
fn read_content(xml: &[u8]) -> String {
    let mut reader = Reader::from_reader(xml);
    let mut back = String::new();
    loop {
        match reader.read_event().expect("well-formed") {
            Event::Text(t) => back.push_str(&t.unescape().expect("references resolve")),
            Event::CData(t) => back.push_str(std::str::from_utf8(&t).expect("UTF-8")),
            Event::Eof => return back,
            _ => {}
        }
    }
}
