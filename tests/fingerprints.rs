//! Fingerprints made by the writer as it encodes (`fingerprint_records`): the same as a
//! snapshot's own pass makes, for every record, in order, whatever thread encoded it.

use std::path::Path;
use std::sync::Arc;

use fastfeed_core::fingerprint::fingerprint_jsonl;
use fastfeed_core::writer::{SetKind, SharedChunk};
use fastfeed_core::{FeedType, FeedWriter, Options};

fn chunk(records: usize) -> Vec<u8> {
    (0..records)
        .map(|i| {
            let blank = if i % 7 == 3 { "\n" } else { "" };
            format!(
                "{blank}{{\"url\":\"http://h.example.com/{i}\",\"content\":\"{}\",\"metadata\":{{\"n\":\"{i}\"}}}}\n",
                "x".repeat(i % 300)
            )
        })
        .collect::<String>()
        .into_bytes()
}

fn writer(dir: &Path) -> FeedWriter {
    let opts = Options {
        workers: 2,
        ..Options::default()
    };
    FeedWriter::new(dir, "docs", FeedType::Incremental, opts).unwrap()
}

#[test]
fn the_writer_fingerprints_every_record_as_the_snapshot_pass_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    let bytes = chunk(5_000);
    let shared: SharedChunk = Arc::new(bytes.clone());
    w.add_jsonl(Arc::clone(&shared)).unwrap();
    assert!(w.take_fingerprints().is_empty(), "off by default");

    w.fingerprint_records(true).unwrap();
    w.start_jsonl(Arc::clone(&shared));
    w.start_jsonl(shared);
    for _ in 0..2 {
        w.wait_jsonl().unwrap();
        let built = w.take_fingerprints();
        let (expected, _) = fingerprint_jsonl(&bytes, 3).unwrap();
        assert_eq!(built.len(), 5_000);
        assert_eq!(built.rows(), expected.rows());
        assert_eq!(built.spans(1, 7), expected.spans(1, 7));
        assert_eq!(built.keys(), expected.keys());
    }
    w.finish().unwrap();
}

#[test]
fn a_writer_that_fingerprints_refuses_what_a_snapshot_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    w.fingerprint_records(true).unwrap();
    let delete = b"{\"url\":\"http://h.example.com/1\"}\n{\"url\":\"http://h.example.com/2\",\"action\":\"delete\"}\n";
    let err = w.add_jsonl(Arc::new(delete.to_vec())).unwrap_err();
    assert!(err.to_string().contains("no deletes"), "{err}");
    // Once off, a delete is a record as any other (a sync's deletes follow its snapshot).
    w.fingerprint_records(false).unwrap();
    w.add_jsonl(Arc::new(delete.to_vec())).unwrap();
    assert!(w.take_fingerprints().is_empty());

    let groups = tempfile::tempdir().unwrap();
    let mut g = FeedWriter::create(
        SetKind::Groups,
        groups.path(),
        "groups",
        FeedType::Incremental,
        Options::default(),
    )
    .unwrap();
    let err = g.fingerprint_records(true).unwrap_err();
    assert!(err.to_string().contains("only document records"), "{err}");
}
