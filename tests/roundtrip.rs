//! Property tests: whatever a user gives, a receiver decodes the same bytes back.
//!
//! quick-xml neither normalises attribute values nor line ends, so besides decoding, these
//! tests assert that nothing a conformant parser would rewrite (raw CR, or TAB/LF/CR inside an
//! attribute) ever reaches the file.

use std::io::Read;

use base64_simd::STANDARD;
use fastfeed_core::encode::Compress;
use fastfeed_core::writer::SetKind;
use fastfeed_core::{Content, FeedType, FeedWriter, Options, Record};
use proptest::prelude::*;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

mod common;

#[derive(Debug, Default, PartialEq)]
struct Decoded {
    url: String,
    displayurl: Option<String>,
    metadata: Vec<(Vec<u8>, Vec<u8>)>,
    content: Option<Vec<u8>>,
}

fn attr(e: &BytesStart<'_>, name: &str) -> Option<String> {
    let a = e.try_get_attribute(name).unwrap()?;
    let raw = &a.value;
    assert!(
        !raw.iter()
            .any(|b| matches!(b, b'\t' | b'\n' | b'\r' | b'<')),
        "raw attribute {name} would be normalised: {raw:?}"
    );
    Some(a.unescape_value().unwrap().into_owned())
}

fn decode_feed(xml: &[u8]) -> Vec<Decoded> {
    let mut reader = Reader::from_reader(xml);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut encoding: Option<String> = None;
    let mut text: Option<Vec<u8>> = None;
    loop {
        let event = reader.read_event_into(&mut buf).unwrap();
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => match e.name().as_ref() {
                b"record" => out.push(Decoded {
                    url: attr(e, "url").unwrap(),
                    displayurl: attr(e, "displayurl"),
                    ..Default::default()
                }),
                b"meta" => {
                    let (name, content) = (attr(e, "name").unwrap(), attr(e, "content").unwrap());
                    let pair = if attr(e, "encoding").as_deref() == Some("base64binary") {
                        (
                            STANDARD.decode_to_vec(name).unwrap(),
                            STANDARD.decode_to_vec(content).unwrap(),
                        )
                    } else {
                        (name.into_bytes(), content.into_bytes())
                    };
                    out.last_mut().unwrap().metadata.push(pair);
                }
                b"content" => {
                    encoding = attr(e, "encoding");
                    text = Some(Vec::new());
                    if matches!(event, Event::Empty(_)) {
                        out.last_mut().unwrap().content = text.take();
                    }
                }
                _ => {}
            },
            Event::Text(t) => {
                if let Some(acc) = text.as_mut() {
                    assert!(
                        !t.as_ref().contains(&b'\r'),
                        "raw CR in text would become LF"
                    );
                    acc.extend_from_slice(t.unescape().unwrap().as_bytes());
                }
            }
            Event::CData(t) => {
                let acc = text.as_mut().expect("CDATA only in content");
                assert!(
                    !t.as_ref().contains(&b'\r'),
                    "raw CR in a CDATA section would become LF"
                );
                acc.extend_from_slice(&t);
            }
            Event::End(e) if e.name().as_ref() == b"content" => {
                let raw = text.take().unwrap();
                let bytes = match encoding.as_deref() {
                    None => raw,
                    Some("base64binary") => STANDARD.decode_to_vec(&raw).unwrap(),
                    Some("base64compressed") => {
                        let z = STANDARD.decode_to_vec(&raw).unwrap();
                        let mut inflated = Vec::new();
                        flate2::read::ZlibDecoder::new(&z[..])
                            .read_to_end(&mut inflated)
                            .unwrap();
                        inflated
                    }
                    Some(other) => panic!("unknown encoding {other}"),
                };
                out.last_mut().unwrap().content = Some(bytes);
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    out
}

/// Builds a feed set in a temp dir and decodes every file, in manifest order.
fn round_trip(
    records: &[Record<'static>],
    opts: Options,
) -> (Vec<Decoded>, Vec<fastfeed_core::ManifestEntry>) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = FeedWriter::new(dir.path(), "ds", FeedType::Incremental, opts.clone()).unwrap();
    w.add_batch(records).unwrap();
    let (entries, _) = w.finish().unwrap();
    let mut decoded = Vec::new();
    for e in &entries {
        let xml = std::fs::read(dir.path().join(&e.file)).unwrap();
        assert!(
            xml.len() as u64 <= opts.max_bytes || e.records == 1,
            "{} over the cap",
            e.file
        );
        decoded.extend(decode_feed(&xml));
    }
    (decoded, entries)
}

fn expected(r: &Record<'_>) -> Decoded {
    let mut metadata: Vec<_> = r
        .metadata
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    Decoded {
        url: r.url.to_string(),
        displayurl: r.displayurl.clone(),
        metadata,
        content: r.content.as_ref().map(|c| match c {
            Content::Text(s) => s.as_bytes().to_vec(),
            Content::Bytes(b) => b.to_vec(),
            _ => unreachable!(),
        }),
    }
}

/// Any text, weighted towards what breaks naive XML writers.
fn nasty_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("]]>".to_string()),
        Just("&<>\"'".to_string()),
        Just("\r\n".to_string()),
        Just("\r".to_string()),
        Just("\t".to_string()),
        Just("\u{1}\u{8}\u{1F}".to_string()),
        Just("\u{FFFE}\u{FFFF}\u{FFFD}".to_string()),
        Just("😀𝄞".to_string()),
        "[a-z ]{0,40}",
        any::<String>(),
    ];
    prop::collection::vec(pieces, 0..6).prop_map(|v| v.concat())
}

fn record() -> impl Strategy<Value = Record<'static>> {
    (
        "[a-z]{1,8}",
        nasty_text(),
        proptest::option::of(nasty_text().prop_filter("no forbidden chars in urls", |s| {
            fastfeed_core::escape::is_representable(s) && !s.is_empty()
        })),
        prop::collection::vec((nasty_text(), nasty_text()), 0..4),
        prop_oneof![
            nasty_text().prop_map(|s| Some(Content::Text(s.into()))),
            prop::collection::vec(any::<u8>(), 0..3000)
                .prop_map(|b| Some(Content::Bytes(b.into()))),
            Just(None),
        ],
    )
        .prop_map(|(host, path, displayurl, meta, content)| {
            let path: String = path
                .chars()
                .filter(|c| !c.is_control() && *c != '\u{FFFE}' && *c != '\u{FFFF}')
                .collect();
            Record {
                url: format!("http://{host}.example.com/{path}").into(),
                displayurl,
                metadata: meta
                    .into_iter()
                    .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                    .map(|(n, v)| (n.into(), v.into()))
                    .collect(),
                content,
                ..Default::default()
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_byte_survives(records in prop::collection::vec(record(), 1..12), compress in prop_oneof![Just(Compress::Auto), Just(Compress::Always), Just(Compress::Never)]) {
        let opts = Options { max_bytes: 4000, compress, ..Options::default() };
        let (decoded, entries) = round_trip(&records, opts);
        let want: Vec<_> = records.iter().map(expected).collect();
        prop_assert_eq!(decoded, want);
        prop_assert_eq!(entries.iter().map(|e| e.records).sum::<u64>(), records.len() as u64);
    }
}

#[test]
fn a_split_full_feed_is_full_first_then_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        max_records: 2,
        ..Options::default()
    };
    let mut w = FeedWriter::new(dir.path(), "docs", FeedType::Full, opts).unwrap();
    let records: Vec<Record> = (0..5)
        .map(|i| Record {
            url: format!("http://h.example.com/{i}").into(),
            content: Some(Content::Text(format!("doc {i}").into())),
            ..Default::default()
        })
        .collect();
    w.add_batch(&records).unwrap();
    let (entries, _) = w.finish().unwrap();
    let types: Vec<_> = entries.iter().map(|e| e.feedtype).collect();
    assert_eq!(
        types,
        [FeedType::Full, FeedType::Incremental, FeedType::Incremental]
    );
    let second = std::fs::read_to_string(dir.path().join(&entries[1].file)).unwrap();
    assert!(second.contains("<feedtype>incremental</feedtype>"));
    let manifest = std::fs::read_to_string(dir.path().join("manifest.jsonl")).unwrap();
    assert_eq!(manifest.lines().count(), 3);
}

#[test]
fn a_bad_record_leaves_nothing_of_its_batch() {
    let (_dir, mut w) = common::docs_writer(Options::default());
    let good = Record {
        url: "http://h.example.com/ok".into(),
        ..Default::default()
    };
    let bad = Record {
        url: "http://h.example.com/bad".into(),
        pagerank: Some(5),
        ..Default::default()
    };
    let err = w.add_batch(&[good.clone(), bad]).unwrap_err();
    assert!(
        matches!(
            err,
            fastfeed_core::Error::Record {
                index: 1,
                field: Some("pagerank"),
                kind: fastfeed_core::error::RecordErrorKind::Invalid,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(w.records(), 0);
    w.add_batch(&[good]).unwrap();
    let (entries, _) = w.finish().unwrap();
    assert_eq!(entries[0].records, 1);
}

/// Names and namespaces of principals: anything XML can carry, without the leading or trailing
/// white space the appliance strips (those are refused, see `acl.rs`).
fn principal_name() -> impl Strategy<Value = String> {
    nasty_text().prop_map(|s| {
        let kept: String = s
            .chars()
            .filter(|c| fastfeed_core::escape::is_representable(&c.to_string()))
            .collect();
        let trimmed = kept.trim();
        if trimmed.is_empty() {
            "x".to_owned()
        } else {
            trimmed.to_owned()
        }
    })
}

/// The text of every `<principal>` of a file, decoded, with its attributes.
fn principals(xml: &[u8]) -> Vec<(String, Vec<(String, String)>)> {
    let mut reader = Reader::from_reader(xml);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut open: Option<(String, Vec<(String, String)>)> = None;
    loop {
        match reader.read_event_into(&mut buf).unwrap() {
            Event::Start(e) if e.name().as_ref() == b"principal" => {
                let attrs = e
                    .attributes()
                    .map(|a| {
                        let a = a.unwrap();
                        let key = String::from_utf8(a.key.as_ref().to_vec()).unwrap();
                        let value = attr(&e, &key).unwrap();
                        (key, value)
                    })
                    .collect();
                open = Some((String::new(), attrs));
            }
            Event::Text(t) => {
                if let Some((name, _)) = open.as_mut() {
                    assert!(!t.as_ref().contains(&b'\r'), "raw CR in a principal");
                    name.push_str(&t.unescape().unwrap());
                }
            }
            Event::End(e) if e.name().as_ref() == b"principal" => out.push(open.take().unwrap()),
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn principal_names_survive_in_acls_and_groups(names in prop::collection::vec(principal_name(), 1..6), ns in principal_name()) {
        use fastfeed_core::acl::{Access, Acl, Principal, Scope};
        use fastfeed_core::groups::Membership;
        let principal = |name: &String, access| Principal {
            name: name.clone(),
            scope: Scope::User,
            access,
            namespace: Some(ns.clone()),
            case_sensitive: Some(false),
            unqualified: false,
        };
        let dir = tempfile::tempdir().unwrap();
        let acl = Acl { principals: names.iter().map(|n| principal(n, Some(Access::Deny))).collect(), ..Acl::default() };
        let record = Record { url: "http://h.example.com/doc".into(), acl: Some(acl), ..Default::default() };
        let mut w = FeedWriter::new(&dir.path().join("f"), "ds", FeedType::Incremental, Options::default()).unwrap();
        w.add_batch(&[record]).unwrap();
        let (entries, _) = w.finish().unwrap();
        let xml = std::fs::read(dir.path().join("f").join(&entries[0].file)).unwrap();
        let got = principals(&xml);
        prop_assert_eq!(got.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), names.clone());
        for (_, attrs) in &got {
            prop_assert!(attrs.contains(&("namespace".to_owned(), ns.clone())));
            prop_assert!(attrs.contains(&("case-sensitivity-type".to_owned(), "everything-case-insensitive".to_owned())));
        }

        let membership = Membership {
            group: Principal { scope: Scope::Group, ..principal(&names[0], None) },
            members: names.iter().map(|n| principal(n, None)).collect(),
        };
        let mut g = FeedWriter::create(SetKind::Groups, &dir.path().join("g"), "ldap", FeedType::Incremental, Options::default()).unwrap();
        g.add_memberships(&[membership]).unwrap();
        let (entries, _) = g.finish().unwrap();
        let xml = std::fs::read(dir.path().join("g").join(&entries[0].file)).unwrap();
        let got = principals(&xml);
        let mut want = vec![names[0].clone()];
        want.extend(names.iter().cloned());
        prop_assert_eq!(got.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), want);
        prop_assert!(got[1..].iter().all(|(_, a)| a.contains(&("scope".to_owned(), "USER".to_owned()))));
    }
}
