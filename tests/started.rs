//! Chunks of JSON Lines encoded while the caller goes on (`start_jsonl`, `wait_jsonl`).

use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};

use fastfeed_core::writer::SharedChunk;
use fastfeed_core::Options;

mod common;

/// Chunk bytes that note the thread that drops them.
struct Noted {
    bytes: Vec<u8>,
    dropped_on: Arc<Mutex<Vec<ThreadId>>>,
}

impl AsRef<[u8]> for Noted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Noted {
    fn drop(&mut self) {
        self.dropped_on.lock().unwrap().push(thread::current().id());
    }
}

fn lines(first: usize, count: usize) -> Vec<u8> {
    (first..first + count)
        .map(|i| format!("{{\"url\": \"http://h.example.com/{i}\", \"content\": \"{i}\"}}\n"))
        .collect::<String>()
        .into_bytes()
}

/// A Python buffer may only be released on the thread that holds the GIL: the encoding threads
/// must never drop the last reference to a chunk, even when the caller waits for it at once.
#[test]
fn the_last_reference_to_a_chunk_is_dropped_by_the_caller() {
    let opts = Options {
        workers: 2,
        ..Options::default()
    };
    let (_dir, mut w) = common::docs_writer(opts);
    let dropped_on = Arc::new(Mutex::new(Vec::new()));
    let chunk = |first| -> SharedChunk {
        Arc::new(Noted {
            // Over 16 pieces of 4 KB, so that every thread takes some.
            bytes: lines(first, 2_000),
            dropped_on: Arc::clone(&dropped_on),
        })
    };
    w.start_jsonl(chunk(0));
    for n in 1..200 {
        w.start_jsonl(chunk(n * 2_000));
        assert_eq!(w.wait_jsonl().unwrap().lines, 2_000);
    }
    w.wait_jsonl().unwrap();
    // And when the writer is dropped with chunks still being encoded.
    w.start_jsonl(chunk(0));
    w.start_jsonl(chunk(0));
    drop(w);
    let dropped_on = dropped_on.lock().unwrap();
    assert_eq!(dropped_on.len(), 202);
    assert!(dropped_on.iter().all(|&id| id == thread::current().id()));
}

#[test]
fn waiting_with_nothing_started_or_finishing_with_chunks_started_is_refused() {
    let (_dir, mut w) = common::docs_writer(Options::default());
    let err = w.wait_jsonl().unwrap_err();
    assert_eq!(err.to_string(), "no chunk of JSON Lines was started");
    w.start_jsonl(Arc::new(lines(0, 3)));
    let err = w.finish().unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 chunk(s) of JSON Lines were started and not waited for"
    );
}
