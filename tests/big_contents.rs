//! Contents larger than a block, read from their file a block at a time, and records larger
//! than what a thread holds, moved out of memory: the feed is byte for byte what the same
//! content given in memory makes.

use std::io::Read;
use std::path::Path;

use base64_simd::STANDARD;
use fastfeed_core::encode::{Compress, Scratch, IN_BLOCK};
use fastfeed_core::record::{AclFormat, EncodeOptions, FeedKind};
use fastfeed_core::{Content, FeedType, Options, Record};
use quick_xml::events::Event;
use xxhash_rust::xxh3::xxh3_64_with_seed;

mod common;

/// Bytes no deflater shrinks: hashes of a counter.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len.div_ceil(8) as u64)
        .flat_map(|i| xxh3_64_with_seed(&i.to_le_bytes(), seed).to_le_bytes())
        .collect();
    bytes.truncate(len);
    bytes
}

/// Text of many scripts, so that blocks end inside characters of 2, 3 and 4 bytes.
fn text(len: usize) -> String {
    let words = [
        "caf\u{e9} ",
        "\u{65e5}\u{672c}\u{8a9e} ",
        "\u{1f600} ",
        "search ",
        "<&>\n",
    ];
    let mut s = String::new();
    let mut i = 0u64;
    while s.len() < len {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(words[(i >> 60) as usize % words.len()]);
    }
    s
}

/// Printable noise: text that deflating does not make smaller once in base64.
fn printable(len: usize) -> String {
    noise(len, 7)
        .into_iter()
        .map(|b| char::from(b' ' + b % 94))
        .collect()
}

fn record<'a>(content: Content<'a>, mimetype: &str) -> Record<'a> {
    Record {
        url: "http://docs.example.com/big".into(),
        mimetype: Some(mimetype.into()),
        content: Some(content),
        ..Default::default()
    }
}

fn encode(record: &Record<'_>, compress: Compress) -> Vec<u8> {
    let mut out = Vec::new();
    try_encode(record, compress, &mut out).unwrap();
    out
}

/// Encodes a record as record 0 of an incremental feed into `out`.
fn try_encode(
    record: &Record<'_>,
    compress: Compress,
    out: &mut Vec<u8>,
) -> fastfeed_core::error::Result<()> {
    let kind = FeedKind {
        feedtype: FeedType::Incremental,
        web: false,
    };
    let opts = EncodeOptions {
        compress,
        acl_format: AclFormat::PerUrl,
    };
    record.encode_into(0, kind, opts, &mut Scratch::new(1), out)
}

/// The bytes a receiver gets from an encoded record's content.
fn decoded(xml: &[u8]) -> Vec<u8> {
    let xml = std::str::from_utf8(xml).unwrap();
    let body = xml.split("<content").nth(1).unwrap();
    let (open, rest) = body.split_once('>').unwrap();
    let inner = rest.rsplit_once("</content>").unwrap().0;
    if open.contains("base64compressed") {
        let raw = STANDARD.decode_to_vec(inner).unwrap();
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else if open.contains("base64binary") {
        STANDARD.decode_to_vec(inner).unwrap()
    } else {
        // Escaped text and CDATA sections, as an XML parser reads them.
        let element = format!("<content>{inner}</content>");
        let mut reader = quick_xml::Reader::from_str(&element);
        let mut text = Vec::new();
        loop {
            match reader.read_event().unwrap() {
                Event::Text(t) => text.extend_from_slice(t.unescape().unwrap().as_bytes()),
                Event::CData(t) => text.extend_from_slice(&t),
                Event::Eof => return text,
                _ => {}
            }
        }
    }
}

fn form(xml: &[u8]) -> &'static str {
    let xml = String::from_utf8_lossy(xml);
    ["base64compressed", "base64binary"]
        .into_iter()
        .find(|f| xml.contains(f))
        .unwrap_or("text")
}

#[test]
fn a_file_read_in_blocks_gives_the_record_its_bytes_in_memory_give() {
    let dir = tempfile::tempdir().unwrap();
    let big = 2 * IN_BLOCK + 1000;
    let structured: Vec<u8> = (0..big)
        .map(|i| (i % 97) as u8 ^ (i / 5000) as u8)
        .collect();
    let mut control = text(big).into_bytes();
    control[IN_BLOCK + 5] = 1;
    let mut not_utf8 = text(big).into_bytes();
    not_utf8[2 * IN_BLOCK + 3] = 0xff;
    let mut unrepresentable = printable(big).into_bytes();
    unrepresentable[big - 2] = 1;
    // (what, its bytes, its type, the compression asked, the form expected)
    let cases: Vec<(&str, Vec<u8>, &str, Compress, &str)> = vec![
        (
            "binary",
            structured.clone(),
            "application/octet-stream",
            Compress::Auto,
            "base64compressed",
        ),
        (
            "noise",
            noise(big, 1),
            "application/octet-stream",
            Compress::Auto,
            "base64binary",
        ),
        (
            "noise, always",
            noise(big, 2),
            "application/octet-stream",
            Compress::Always,
            "base64compressed",
        ),
        (
            "binary, never",
            structured,
            "application/octet-stream",
            Compress::Never,
            "base64binary",
        ),
        (
            "text",
            text(big).into_bytes(),
            "text/plain",
            Compress::Auto,
            "base64compressed",
        ),
        (
            "text, never",
            text(big).into_bytes(),
            "text/html",
            Compress::Never,
            "text",
        ),
        (
            "text that does not shrink",
            printable(big).into_bytes(),
            "text/plain",
            Compress::Auto,
            "text",
        ),
        (
            "text with a control character",
            control.clone(),
            "text/plain",
            Compress::Auto,
            "base64compressed",
        ),
        (
            "text XML cannot carry, not shrinking",
            unrepresentable,
            "text/plain",
            Compress::Auto,
            "base64compressed",
        ),
        (
            "text type, not UTF-8",
            not_utf8.clone(),
            "text/plain",
            Compress::Auto,
            "base64compressed",
        ),
        (
            "text type, not UTF-8, never",
            not_utf8,
            "text/plain",
            Compress::Never,
            "base64binary",
        ),
        (
            "text XML cannot carry, never",
            control,
            "text/plain",
            Compress::Never,
            "base64binary",
        ),
    ];
    for (i, (what, bytes, mimetype, compress, expected)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("{i}.bin"));
        std::fs::write(&path, &bytes).unwrap();
        let from_file = encode(&record(Content::Path(path), mimetype), compress);
        let in_memory = match std::str::from_utf8(&bytes) {
            Ok(s) if mimetype.starts_with("text/") => Content::Text(s.into()),
            _ => Content::Bytes(bytes.as_slice().into()),
        };
        let from_memory = encode(&record(in_memory, mimetype), compress);
        assert!(
            from_file == from_memory,
            "{what}: the file's record differs"
        );
        assert_eq!(form(&from_file), expected, "{what}");
        assert!(
            decoded(&from_file) == bytes,
            "{what}: does not decode to the file"
        );
    }
}

/// The files of a feed set, concatenated.
fn feeds(dir: &Path, files: &[fastfeed_core::ManifestEntry]) -> Vec<Vec<u8>> {
    files
        .iter()
        .map(|e| std::fs::read(dir.join(&e.file)).unwrap())
        .collect()
}

#[test]
fn a_record_moved_out_of_memory_is_written_in_its_place_and_leaves_nothing_behind() {
    let files = tempfile::tempdir().unwrap();
    // Noise: 8 MB of base64, more than a thread holds before it moves a record out.
    let big = noise(6 << 20, 3);
    let path = files.path().join("big.bin");
    std::fs::write(&path, &big).unwrap();
    let small = |i: usize| Record {
        url: format!("http://docs.example.com/{i}").into(),
        content: Some(Content::Text(format!("document {i}").into())),
        ..Default::default()
    };
    let batch = |big: Content<'static>| {
        let mut records: Vec<Record<'static>> = (0..3).map(small).collect();
        records.insert(1, record(big, "application/octet-stream"));
        records.push(record(
            Content::Text(text(3 * IN_BLOCK).into()),
            "text/plain",
        ));
        records
    };
    // A cap under the big record's size: it goes alone into a file of its own.
    let opts = || Options {
        max_bytes: 5_000_000,
        workers: 2,
        ..Options::default()
    };
    let (out, mut writer) = common::docs_writer(opts());
    let report = writer.add_batch(&batch(Content::Path(path))).unwrap();
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert_eq!(report.warnings[0].0, 1);
    let (set, _) = writer.finish().unwrap();
    let by_path = feeds(out.path(), &set);

    let (memory_out, mut writer) = common::docs_writer(opts());
    writer
        .add_batch(&batch(Content::Bytes(big.clone().into())))
        .unwrap();
    let (memory_set, _) = writer.finish().unwrap();
    assert!(by_path == feeds(memory_out.path(), &memory_set));

    assert_eq!(set.iter().map(|e| e.records).collect::<Vec<_>>(), [1, 1, 3]);
    let second = String::from_utf8(by_path[1].clone()).unwrap();
    let record = &second[second.find("<record").unwrap()..second.rfind("</group>").unwrap()];
    assert!(decoded(record.as_bytes()) == big);
    // Only the feed files and the manifest: the spill files had no name.
    let mut names: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "docs-000001.xml",
            "docs-000002.xml",
            "docs-000003.xml",
            "manifest.jsonl"
        ]
    );
}

#[test]
fn a_file_hashed_in_blocks_has_the_fingerprint_of_its_bytes_in_memory() {
    use fastfeed_core::fingerprint::fingerprint;
    let dir = tempfile::tempdir().unwrap();
    let big = 2 * IN_BLOCK + 7;
    let text = text(big);
    let mut not_utf8 = text.clone().into_bytes();
    not_utf8[IN_BLOCK] = 0xff;
    for (what, bytes, mimetype) in [
        ("text", text.into_bytes(), "text/plain"),
        ("text type, not UTF-8", not_utf8, "text/plain"),
        ("binary", noise(big, 5), "application/octet-stream"),
    ] {
        let path = dir.path().join("doc");
        std::fs::write(&path, &bytes).unwrap();
        let in_memory = match std::str::from_utf8(&bytes) {
            Ok(s) => Content::Text(s.into()),
            Err(_) => Content::Bytes(bytes.as_slice().into()),
        };
        assert_eq!(
            fingerprint(0, &record(Content::Path(path), mimetype)).unwrap(),
            fingerprint(0, &record(in_memory, mimetype)).unwrap(),
            "{what}"
        );
    }
}

#[test]
fn a_file_too_big_for_any_feed_in_base64_is_refused_before_it_is_encoded() {
    use fastfeed_core::error::{Error, RecordErrorKind};
    use fastfeed_core::limits::HARD_MAX_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.bin");
    // Sparse: it takes no room, and under `never` it can only go as base64, a third larger.
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(HARD_MAX_BYTES / 4 * 3 + (1 << 20)).unwrap();
    let r = record(Content::Path(path.clone()), "application/octet-stream");
    let mut out = Vec::new();
    let started = std::time::Instant::now();
    match try_encode(&r, Compress::Never, &mut out) {
        Err(Error::Record {
            index: 0,
            field: Some("content_path"),
            kind: RecordErrorKind::TooLarge,
            message,
            ..
        }) => assert!(message.contains("huge.bin"), "{message}"),
        other => panic!("{:?}", other.map(|()| out.len())),
    }
    // Refused from its size, not once a gigabyte of base64 was made.
    assert!(out.len() < 1 << 20);
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}
