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

/// A file big by its size (3 MB or more): sparse, it takes no disk and deflates to little.
fn big_file(dir: &std::path::Path) -> std::path::PathBuf {
    let big = dir.join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(3_200_000)
        .unwrap();
    big
}

/// The numbers `i` of the URLs `http://h.example.com/{i}` in the feed files of `out`, in order.
fn numbers_written(out: &std::path::Path) -> Vec<usize> {
    let mut files: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    let feed: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    feed.split("url=\"http://h.example.com/")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
        .collect()
}

/// The lines that refusals name.
fn indices(refused: Vec<fastfeed_core::Error>) -> Vec<usize> {
    refused
        .into_iter()
        .map(|e| match e {
            fastfeed_core::Error::Record { index, .. } => index,
            other => panic!("{other}"),
        })
        .collect()
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

/// A chunk naming more big files than a round of encoding takes is written in rounds, so that
/// the records waiting for the writer stay few: all of its records, once each and in order;
/// and a bad line in a later round says how many lines before it were written.
#[test]
fn a_chunk_naming_many_big_files_is_written_in_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let big = big_file(dir.path());
    let line = |i: usize, path: &std::path::Path| {
        format!(
            "{{\"url\": \"http://h.example.com/{i}\", \"content_path\": {:?}}}\n",
            path
        )
    };
    let chunk: String = (0..300).map(|i| line(i, &big)).collect();
    let opts = Options {
        workers: 2,
        ..Options::default()
    };
    let (out, mut w) = common::docs_writer(opts.clone());
    assert_eq!(
        w.add_jsonl(Arc::new(chunk.clone().into_bytes()))
            .unwrap()
            .lines,
        300
    );
    assert_eq!(w.records(), 300);
    w.finish().unwrap();
    let urls = numbers_written(out.path());
    assert_eq!(urls, (0..300).collect::<Vec<_>>());

    // Line 250 names a file that is not there: the first round (128 big files) was written.
    let bad: String = (0..300)
        .map(|i| {
            line(
                i,
                if i == 250 {
                    std::path::Path::new("/no/such")
                } else {
                    &big
                },
            )
        })
        .collect();
    let (_out, mut w) = common::docs_writer(opts);
    match w.add_jsonl(Arc::new(bad.into_bytes())) {
        Err(fastfeed_core::Error::Record { index: 250, .. }) => {}
        other => panic!("{:?}", other.map(|r| r.lines)),
    }
    let written = w.written_before_error();
    assert!(written > 0 && written < 250, "{written}");
    assert_eq!(w.records(), written as u64);
}

/// Skipping, a chunk's refused lines are set aside in one pass, each named by its line in the
/// chunk, whatever its piece or round, and the other lines are written in order.
#[test]
fn a_writer_skipping_refused_lines_takes_the_rest_of_the_chunk_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let big = big_file(dir.path());
    let refused = [0, 1, 130, 250, 299];
    let chunk: String = (0..300)
        .map(|i| match i {
            0 => "{\"url\": \"http://h.example.com/0\",\n".to_owned(),
            1 => "[1]\n".to_owned(),
            130 => "{\"url\": \"h.example.com/130\", \"content\": \"x\"}\n".to_owned(),
            _ => format!(
                "{{\"url\": \"http://h.example.com/{i}\", \"content_path\": {:?}}}\n",
                if refused.contains(&i) {
                    std::path::Path::new("/no/such")
                } else {
                    &big
                }
            ),
        })
        .collect();
    let opts = Options {
        workers: 2,
        ..Options::default()
    };
    let (out, mut w) = common::docs_writer(opts);
    w.skip_refused(true);
    assert_eq!(
        w.add_jsonl(Arc::new(chunk.into_bytes())).unwrap().lines,
        300
    );
    // Handed over a few at a time, each once.
    let mut found = indices(w.take_refused(2));
    found.extend(indices(w.take_refused(100)));
    assert_eq!(found, refused);
    assert!(w.take_refused(100).is_empty());
    assert_eq!(w.records(), 295);
    w.finish().unwrap();
    let urls = numbers_written(out.path());
    let good: Vec<usize> = (0..300).filter(|i| !refused.contains(i)).collect();
    assert_eq!(urls, good);
}

/// Skipping, a chunk that fails for another reason than a bad line (here its big record cannot
/// be moved out to disk) sets none of its lines aside: taken again, each is refused once.
#[test]
fn a_chunk_that_fails_sets_no_line_aside_and_taken_again_refuses_each_once() {
    let dir = tempfile::tempdir().unwrap();
    // Incompressible, so that its record is big enough to be moved out to disk.
    let big = dir.path().join("noise");
    let mut noise = std::io::Read::take(std::fs::File::open("/dev/urandom").unwrap(), 5 << 20);
    std::io::copy(&mut noise, &mut std::fs::File::create(&big).unwrap()).unwrap();
    // The bad line leads the chunk, the big file ends it: in pieces of their own.
    let mut chunk = b"{\"url\": \"h.example.com/0\", \"content\": \"x\"}\n".to_vec();
    for i in 1..2000 {
        let text = "t".repeat(1000);
        chunk.extend(
            format!("{{\"url\": \"http://h.example.com/{i}\", \"content\": \"{text}\"}}\n").bytes(),
        );
    }
    chunk.extend(
        format!("{{\"url\": \"http://h.example.com/2000\", \"content_path\": {big:?}}}\n").bytes(),
    );
    let chunk: SharedChunk = Arc::new(chunk);
    let opts = Options {
        workers: 2,
        ..Options::default()
    };
    let (out, mut w) = common::docs_writer(opts);
    w.skip_refused(true);
    std::fs::remove_dir(out.path()).unwrap();
    match w.add_jsonl(Arc::clone(&chunk)) {
        Err(fastfeed_core::Error::Io { .. }) => {}
        other => panic!("{:?}", other.map(|r| r.lines)),
    }
    assert!(w.take_refused(100).is_empty());
    std::fs::create_dir(out.path()).unwrap();
    assert_eq!(w.add_jsonl(chunk).unwrap().lines, 2001);
    assert_eq!(indices(w.take_refused(100)), [0]);
    assert_eq!(w.records(), 2000);
    w.finish().unwrap();
    assert_eq!(numbers_written(out.path()), (1..=2000).collect::<Vec<_>>());
}

/// Skipping, a chunk that fails in a later round (its big record cannot be moved out to disk:
/// the directory went away) leaves written the lines of its rounds before, and hands over the
/// lines they refused, none of the failed round's: those written are taken, and a caller that
/// goes on from `written_before_error` must still be told of those refused.
#[test]
fn a_chunk_that_fails_in_a_later_round_hands_over_the_refusals_of_the_rounds_written() {
    let dir = tempfile::tempdir().unwrap();
    // Small files wait in memory, 12 MB of them a round; the big one's record goes to disk.
    let small = dir.path().join("small");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let big = big_file(dir.path());
    let line = |i: usize, path: &std::path::Path| {
        format!("{{\"url\": \"http://h.example.com/{i}\", \"content_path\": {path:?}}}\n")
    };
    let missing = std::path::Path::new("/no/such");
    let mut chunk: String = (0..40)
        .map(|i| line(i, if i == 3 || i == 30 { missing } else { &small }))
        .collect();
    chunk.push_str(&line(40, &big));
    let (out, mut w) = common::docs_writer(Options {
        workers: 2,
        ..Options::default()
    });
    w.skip_refused(true);
    w.add_jsonl(Arc::new(lines(100, 1))).unwrap();
    // Once the writing thread made it, the file being written stays open; a file made in the
    // directory then fails.
    let first = out.path().join("docs-000001.xml.tmp");
    while !first.exists() {
        thread::sleep(std::time::Duration::from_millis(1));
    }
    let away = dir.path().join("away");
    std::fs::rename(out.path(), &away).unwrap();
    match w.add_jsonl(Arc::new(chunk.into_bytes())) {
        Err(fastfeed_core::Error::Io { .. }) => {}
        other => panic!("{:?}", other.map(|r| r.lines)),
    }
    let written = w.written_before_error();
    assert!((31..=40).contains(&written), "{written}");
    assert_eq!(indices(w.take_refused(100)), [3, 30]);
    std::fs::rename(&away, out.path()).unwrap();
    // The next chunk's refusals are its own.
    let next = [lines(101, 1), b"[1]\n".to_vec()].concat();
    assert_eq!(w.add_jsonl(Arc::new(next)).unwrap().lines, 2);
    assert_eq!(indices(w.take_refused(100)), [1]);
    w.finish().unwrap();
    let mut good = vec![100];
    good.extend((0..written).filter(|i| *i != 3 && *i != 30));
    good.push(101);
    assert_eq!(numbers_written(out.path()), good);
}

/// A chunk is encoded, in all its rounds, as the writer was set when it started: skipping
/// turned off meanwhile, a bad line of its later round is set aside all the same.
#[test]
fn a_chunk_keeps_the_setting_it_started_with_in_its_later_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let big = big_file(dir.path());
    let chunk: String = (0..300)
        .map(|i| {
            let path = if i == 250 {
                std::path::Path::new("/no/such")
            } else {
                &big
            };
            format!("{{\"url\": \"http://h.example.com/{i}\", \"content_path\": {path:?}}}\n")
        })
        .collect();
    let (out, mut w) = common::docs_writer(Options {
        workers: 2,
        ..Options::default()
    });
    w.skip_refused(true);
    w.start_jsonl(Arc::new(chunk.into_bytes()));
    w.skip_refused(false);
    assert_eq!(w.wait_jsonl().unwrap().lines, 300);
    assert_eq!(indices(w.take_refused(100)), [250]);
    w.finish().unwrap();
    let good: Vec<usize> = (0..300).filter(|i| *i != 250).collect();
    assert_eq!(numbers_written(out.path()), good);
}

/// Chunks started two ahead are planned while the two before them are encoded, and encoded once
/// the caller is back; a chunk's next round is planned while its round before is encoded. All
/// their records are written once, in order, and the last reference to each chunk is dropped
/// by the caller, that of a chunk whose next round was planned and never encoded (the round
/// before failed) included.
#[test]
fn chunks_and_rounds_planned_ahead_are_written_in_order_and_let_go_of_by_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let big = big_file(dir.path());
    let dropped_on = Arc::new(Mutex::new(Vec::new()));
    // Lines `first..first + count` naming the big file, but line `bad` a missing one.
    let chunk = |first: usize, count: usize, bad: Option<usize>| -> SharedChunk {
        let bytes = (first..first + count)
            .map(|i| {
                let path = match bad == Some(i) {
                    true => std::path::Path::new("/no/such"),
                    false => &big,
                };
                format!("{{\"url\": \"http://h.example.com/{i}\", \"content_path\": {path:?}}}\n")
            })
            .collect::<String>()
            .into_bytes();
        Arc::new(Noted {
            bytes,
            dropped_on: Arc::clone(&dropped_on),
        })
    };
    let opts = Options {
        workers: 2,
        ..Options::default()
    };
    let (out, mut w) = common::docs_writer(opts.clone());
    // Two rounds each (128 big files a round).
    w.start_jsonl(chunk(0, 130, None));
    w.start_jsonl(chunk(130, 130, None));
    for first in (260..520).step_by(130) {
        w.start_jsonl(chunk(first, 130, None));
        assert_eq!(w.wait_jsonl().unwrap().lines, 130);
    }
    for _ in 0..2 {
        assert_eq!(w.wait_jsonl().unwrap().lines, 130);
    }
    w.finish().unwrap();
    assert_eq!(numbers_written(out.path()), (0..520).collect::<Vec<_>>());

    // Line 250 fails the second round, while the third is planned.
    let (_out, mut w) = common::docs_writer(opts);
    w.start_jsonl(chunk(0, 300, Some(250)));
    w.start_jsonl(chunk(300, 3, None));
    w.start_jsonl(chunk(303, 3, None));
    match w.wait_jsonl() {
        Err(fastfeed_core::Error::Record { index: 250, .. }) => {}
        other => panic!("{:?}", other.map(|r| r.lines)),
    }
    assert_eq!(w.written_before_error(), 128);
    drop(w);
    let dropped_on = dropped_on.lock().unwrap();
    assert_eq!(dropped_on.len(), 7);
    assert!(dropped_on.iter().all(|&id| id == thread::current().id()));
}
