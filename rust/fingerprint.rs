//! Fingerprints of records: what `fastfeed sync` compares with its state to know whether the
//! appliance already holds a record as given.
//!
//! A fingerprint is the 128-bit XXH3 hash of the record's canonical form, version 2: the tag
//! `fastfeed-fp2`, then every field the feed carries, in the schema's order, each as a
//! one-byte field number and its value; a value is a presence byte (absent fields are written
//! as absent, so that removing one changes the fingerprint) and length-prefixed bytes (a
//! content's bytes by their own XXH3-128, so that they are hashed in place). The
//! form is made from the parsed record, not from its input, so what does not change the
//! feed does not change the fingerprint: the order of JSON keys and of metadata names, the
//! spelling of a date (its instant counts; an RFC 822 date still counts as spelt, from when
//! feeds carried it as given: counting its instant alone needs a new version), and the form of
//! a content (text or UTF-8 bytes of it differ only in being text; `content_base64`, `content`
//! bytes and `content_path` give their bytes).
//!
//! Why XXH3 and not SHA-256 (version 1): a build fingerprints each record on the encoding
//! threads as it encodes it (`FeedWriter::fingerprint_records`), and the target is at most 10%
//! of a plain build's time. Inside the build's pass over 1 GB of 1 KB records (best of 4
//! alternating rounds, the CPU having SHA-NI), SHA-256 cost 1.27x the plain build's time (CPU
//! 1.50x), BLAKE3 1.71x (a 1 KB record is one BLAKE3 chunk: no SIMD across chunks), XXH3-128
//! 1.11x; hashing 1 GB is a quarter of a build's CPU with SHA-256, 2 to 3% with XXH3, which
//! leaves the canonical form and handing the fingerprints back (PERFORMANCE.md, "Syncing").
//! A fingerprint detects change:
//! each URL's new form is compared with its own last one, never searched among others, so an
//! accidental collision (a change that goes unsent) has odds of 2^-128 per change, which no
//! collection reaches. XXH3 is not collision-resistant: a source that wants a change unsent
//! can craft one, but whoever writes the source decides what the appliance holds anyway.
//! Where records come from parties who might want an old version kept, `--resend-all` (or
//! `fastfeed state forget`) now and then sends everything regardless.
//!
//! A change of the form or of the hash must change the version tag (`VERSION`): every stored
//! fingerprint then differs, and the next sync sends everything once (the state records the
//! version it holds and says when it changes, see `sets/state.py`).

use std::cell::RefCell;
use std::ops::Range;

use rayon::prelude::*;
use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use crate::error::{Error, RecordErrorKind, Result};
use crate::jsonl;
use crate::record::{parse_date, Action, Content, MetaPair, OpenedFile, Record, Source};

pub type Fingerprint = [u8; 16];

/// Fingerprinted records, laid out as a sync's snapshot takes them by the thread that
/// fingerprints them: a record's URL is written out there and freed at once (kept until the
/// chunk was taken, a million URLs made every allocation of the encoding threads slower).
#[derive(Debug, Default)]
pub struct Fingerprints {
    /// `["url","fingerprint in hex"]` rows, each followed by a comma.
    rows: Vec<u8>,
    /// Each record's line in its chunk (blank lines counted, as errors count them), and where
    /// the line is in the chunk, without its newline.
    places: Vec<(usize, Range<usize>)>,
    /// Hashes of the URLs, to find a URL given twice without an index (see `repeated`).
    keys: Vec<u64>,
}

impl Fingerprints {
    /// Adds the record at `line` of `chunk`, whose text `text` is (a slice of `chunk`).
    pub fn push(&mut self, chunk: &[u8], line: usize, text: &[u8], url: &str, fp: &Fingerprint) {
        let start = text.as_ptr() as usize - chunk.as_ptr() as usize;
        self.places.push((line, start..start + text.len()));
        self.keys.push(url_key(url));
        self.rows.push(b'[');
        // Writing to a Vec cannot fail, and a str is always JSON.
        let _ = serde_json::to_writer(&mut self.rows, url);
        self.rows.extend_from_slice(b",\"");
        hex_into(&mut self.rows, fp);
        self.rows.extend_from_slice(b"\"],");
    }

    /// Moves `other`'s records after these.
    pub fn append(&mut self, other: &mut Fingerprints) {
        self.rows.append(&mut other.rows);
        self.places.append(&mut other.places);
        self.keys.append(&mut other.keys);
    }

    /// Counts the records' lines from `lines` on (a piece's, once the pieces before it are).
    pub fn shift(&mut self, lines: usize) {
        self.places.iter_mut().for_each(|(line, _)| *line += lines);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Each record's line and span in its chunk.
    pub fn places(&self) -> &[(usize, Range<usize>)] {
        &self.places
    }

    /// The records as the state's snapshot table takes them in one statement: a JSON array of
    /// `[url, fingerprint in hex]` (SQLite's json_each reads it far faster than Python binds
    /// rows).
    pub fn rows(&self) -> String {
        let body = self.rows.strip_suffix(b",").unwrap_or(&self.rows);
        let mut rows = String::with_capacity(body.len() + 2);
        rows.push('[');
        rows.push_str(std::str::from_utf8(body).unwrap_or_default());
        rows.push(']');
        rows
    }

    /// Where each record's line is, as `sets/snapshot.py` keeps it: four native-endian i64 per
    /// record (source, start and end of the line in the source, with the chunk's `base` offset
    /// added, and the line's position in the chunk).
    pub fn spans(&self, source: i64, base: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 * self.places.len());
        for (line, span) in &self.places {
            for value in [
                source,
                base + span.start as i64,
                base + span.end as i64,
                *line as i64,
            ] {
                out.extend_from_slice(&value.to_ne_bytes());
            }
        }
        out
    }

    /// The records' URL keys, eight native-endian bytes each, for `repeated`.
    pub fn keys(&self) -> Vec<u8> {
        self.keys.iter().flat_map(|k| k.to_ne_bytes()).collect()
    }
}

/// The version of the canonical form and hash, the first bytes of every form.
pub const VERSION: &str = "fastfeed-fp2";

/// Writes the canonical form into a buffer, hashed in one call once whole (XXH3 fed field by
/// field cost twice as much as hashing the whole).
struct Canonical<'b>(&'b mut Vec<u8>);

impl Canonical<'_> {
    fn field(&mut self, number: u8, value: Option<&[u8]>) {
        self.0
            .extend_from_slice(&[number, u8::from(value.is_some())]);
        if let Some(v) = value {
            self.0.extend_from_slice(&(v.len() as u64).to_le_bytes());
            self.0.extend_from_slice(v);
        }
    }

    fn text(&mut self, number: u8, value: Option<&str>) {
        self.field(number, value.map(str::as_bytes));
    }

    fn flag(&mut self, number: u8, value: Option<bool>) {
        self.field(number, value.map(|b| if b { &b"1"[..] } else { &b"0"[..] }));
    }

    /// An enum by its variant's name, which the version tag pins.
    fn name(&mut self, number: u8, value: Option<impl std::fmt::Debug>) {
        self.text(number, value.map(|v| format!("{v:?}")).as_deref());
    }
}

thread_local! {
    /// Each thread's buffer for canonical forms, reused from record to record.
    static FORM: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Metadata of at most this many values is sorted without allocating.
const SORTED_ON_STACK: usize = 16;

/// What a thread's form buffer may keep between records (a form with large metadata grows it).
const FORM_KEPT: usize = 64 * 1024;

/// The fingerprint of a record; `index` names it in errors (a content that cannot be read).
pub fn fingerprint(index: usize, r: &Record<'_>) -> Result<Fingerprint> {
    fingerprint_opened(index, r, None)
}

/// The fingerprint of a record whose `content_path` file the planning threads opened for its
/// encoding (`opened`, another descriptor of the same opening): read from that opening, it is
/// checked against what the file was when opened, as the encoding's reads are, so the two
/// agree or the record is refused.
pub(crate) fn fingerprint_opened(
    index: usize,
    r: &Record<'_>,
    opened: Option<OpenedFile>,
) -> Result<Fingerprint> {
    FORM.with(|form| {
        let mut form = form.borrow_mut();
        form.clear();
        canonical(index, r, &mut Canonical(&mut form), opened)?;
        let fp = xxh3_128(&form).to_le_bytes();
        form.shrink_to(FORM_KEPT);
        Ok(fp)
    })
}

/// Writes the canonical form of a record.
fn canonical(
    index: usize,
    r: &Record<'_>,
    c: &mut Canonical<'_>,
    opened: Option<OpenedFile>,
) -> Result<()> {
    c.0.extend_from_slice(VERSION.as_bytes());
    c.text(1, Some(&r.url));
    c.name(2, r.action);
    c.text(3, r.mimetype.as_deref());
    c.text(4, r.displayurl.as_deref());
    match &r.last_modified {
        None => c.field(5, None),
        Some(ts) => {
            let (when, rfc822) =
                parse_date(ts).map_err(|m| Error::record(index, Some("last_modified"), m))?;
            let instant = format!("{}.{:09}", when.timestamp(), when.timestamp_subsec_nanos());
            c.text(5, Some(rfc822.unwrap_or(&instant)));
        }
    }
    c.flag(6, r.lock);
    c.name(7, r.authmethod);
    c.text(8, r.pagerank.map(|p| p.to_string()).as_deref());
    c.flag(9, r.crawl_immediately);
    c.flag(10, r.crawl_once);
    // Sorted by name, a name's values in their order: the order of names is not the feed's.
    // Most records give them sorted already, and are spared a copy to sort.
    c.field(11, Some(&(r.metadata.len() as u64).to_le_bytes()));
    let mut pairs = |metadata: &mut dyn Iterator<Item = &MetaPair<'_>>| {
        for (name, value) in metadata {
            c.text(12, Some(name));
            c.text(13, Some(value));
        }
    };
    let m = &r.metadata;
    if m.is_sorted_by(|a, b| a.0 <= b.0) {
        pairs(&mut m.iter());
    } else if m.len() <= SORTED_ON_STACK {
        // Sorted by index on the stack: a stable sort of so few allocates nothing.
        let mut order: [usize; SORTED_ON_STACK] = std::array::from_fn(|i| i);
        let order = &mut order[..m.len()];
        order.sort_by(|&a, &b| m[a].0.cmp(&m[b].0));
        pairs(&mut order.iter().map(|&i| &m[i]));
    } else {
        let mut sorted: Vec<&MetaPair<'_>> = m.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        pairs(&mut sorted.into_iter());
    }
    match &r.content {
        None => c.field(14, None),
        Some(content) => {
            // Only a file's bytes need the type, to be known as text; guessing it from the URL
            // for every record cost about as much as the hash.
            let mimetype = match content {
                Content::Path(_) => r.mimetype(index)?,
                _ => "",
            };
            let mut buf = Vec::new();
            // By its own hash: hashed where it lies, never copied into the form; a file larger
            // than a block a block at a time, never held whole.
            let (hash, text) = match content.source(index, mimetype, &mut buf, opened)? {
                Source::Memory { bytes, text } => (xxh3_128(bytes), text.is_some()),
                mut file => {
                    let mut hash = Xxh3::new();
                    let text = file.blocks_and_text(|block, _| {
                        hash.update(block);
                        Ok(())
                    })?;
                    (hash.digest128(), text)
                }
            };
            c.flag(14, Some(text));
            c.field(15, Some(&hash.to_le_bytes()));
        }
    }
    match &r.acl {
        None => c.field(16, None),
        Some(acl) => {
            c.field(16, Some(&(acl.principals.len() as u64).to_le_bytes()));
            for p in &acl.principals {
                c.text(17, Some(&p.name));
                c.name(18, Some(p.scope));
                c.name(19, p.access);
                c.text(20, p.namespace.as_deref());
                c.flag(21, p.case_sensitive);
                c.flag(22, Some(p.unqualified));
            }
            c.name(23, acl.inheritance);
            c.text(24, acl.inherit_from.as_deref());
        }
    }
    c.flag(25, r.overwrite_acls);
    c.flag(26, Some(r.standalone_acl));
    Ok(())
}

/// The record of a snapshot's line (`line` names it in errors). A snapshot lists documents: a
/// record that deletes or updates is refused.
pub fn snapshot_record(line: usize, text: &[u8]) -> Result<Record<'_>> {
    let record = jsonl::parse_line(line, text)?;
    if !matches!(record.action, None | Some(Action::Add)) {
        return Err(Error::refused(
            RecordErrorKind::NotAllowed,
            line,
            Some("action"),
            "a snapshot lists the documents as they are now: no deletes or updates in it (a \
             URL left out of it is deleted)",
        ));
    }
    Ok(record)
}

/// The records of a chunk of a snapshot (whole lines of JSON Lines), in order, and the chunk's
/// number of lines (see `snapshot_record`). Pieces of the chunk are parsed and hashed on the
/// pool's threads; an error names the chunk's first bad line.
pub fn fingerprint_jsonl(chunk: &[u8], pieces: usize) -> Result<(Fingerprints, usize)> {
    let size = chunk.len().div_ceil(pieces.max(1)).max(1);
    let parts: Vec<Range<usize>> = (0..chunk.len())
        .step_by(size)
        .map(|start| start..(start + size).min(chunk.len()))
        .collect();
    let done: Vec<(Result<Fingerprints>, usize)> = parts
        .into_par_iter()
        .map(|part| {
            let (lines, count) = jsonl::lines_in(chunk, part);
            let mut found = Fingerprints::default();
            let result = lines.into_iter().try_for_each(|(line, text)| {
                let record = snapshot_record(line, text)?;
                let fp = fingerprint(line, &record)?;
                found.push(chunk, line, text, &record.url, &fp);
                Ok(())
            });
            (result.map(|()| found), count)
        })
        .collect();
    let mut out = Fingerprints::default();
    let mut before = 0;
    for (found, count) in done {
        let mut found = found.map_err(|e| e.shifted(before))?;
        found.shift(before);
        out.append(&mut found);
        before += count;
    }
    Ok((out, before))
}

/// A 64-bit hash of a URL, the same for the same URL. XXH3, not the standard library's
/// SipHash: a crafted collision costs only the index that tells the two URLs apart.
pub fn url_key(url: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(url.as_bytes())
}

/// Whether any key is there twice: a URL given twice, or (about once in 10^11 pairs of URLs)
/// two URLs with one hash, which the caller tells apart. Sorting eight bytes a record costs a
/// fraction of indexing every URL, which a snapshot without repeats (nearly all) is spared.
pub fn repeated(keys: &mut [u64]) -> bool {
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

pub fn hex(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(2 * bytes.len());
    hex_into(&mut out, bytes);
    String::from_utf8(out).unwrap_or_default()
}

fn hex_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(line: &str) -> Fingerprint {
        let r = jsonl::parse_line(0, line.as_bytes()).unwrap();
        fingerprint(0, &r).unwrap()
    }

    #[test]
    fn what_does_not_change_the_feed_does_not_change_the_fingerprint() {
        let a = fp(
            r#"{"url":"http://e.example.com/a","content":"hi","metadata":{"a":"1","b":["2","3"]}}"#,
        );
        let b = fp(
            r#"{"metadata":{"b":["2","3"],"a":"1"},"content":"hi","url":"http://e.example.com/a"}"#,
        );
        assert_eq!(a, b);
        let epoch = fp(r#"{"url":"http://e.example.com/a","last_modified":0}"#);
        let text = fp(r#"{"url":"http://e.example.com/a","last_modified":"1970-01-01T00:00:00Z"}"#);
        assert_eq!(epoch, text);
    }

    #[test]
    fn every_field_counts() {
        let base = r#"{"url":"http://e.example.com/a","content":"hi","metadata":{"a":"1"},"acl":{"principals":[{"name":"bob","scope":"user","access":"permit"}]}}"#;
        let changed = [
            base.replace("/a\"", "/b\""),
            base.replace("\"hi\"", "\"ho\""),
            base.replace("\"1\"", "\"2\""),
            base.replace("bob", "alice"),
            base.replace("permit", "deny"),
            base.replace("}]}}", "}]},\"lock\":true}"),
            base.replace(r#""content":"hi""#, r#""content_base64":"aGk=""#),
        ];
        for other in changed {
            assert_ne!(fp(base), fp(&other), "{other}");
        }
    }

    #[test]
    fn rows_and_spans_are_laid_out_for_the_snapshot() {
        let line = r#"{"url":"http://e.example.com/\u00e9\""}"#;
        let chunk = format!("{line}\n{line}\n");
        let (found, _) = fingerprint_jsonl(chunk.as_bytes(), 1).unwrap();
        let rows: Vec<(String, String)> = serde_json::from_str(&found.rows()).unwrap();
        let url = "http://e.example.com/\u{e9}\"".to_string();
        let fp = hex(&fp(line));
        assert_eq!(rows, [(url.clone(), fp.clone()), (url, fp)]);
        let spans = found.spans(2, 100);
        let words: Vec<i64> = spans
            .chunks(8)
            .map(|w| i64::from_ne_bytes(w.try_into().unwrap()))
            .collect();
        let end = line.len() as i64;
        assert_eq!(
            words,
            [2, 100, 100 + end, 0, 2, 101 + end, 101 + 2 * end, 1]
        );
        assert_eq!(found.keys().len(), 16);
        assert_eq!(Fingerprints::default().rows(), "[]");
    }

    #[test]
    fn a_url_given_twice_repeats_its_key() {
        let mut keys = vec![
            url_key("http://a/"),
            url_key("http://b/"),
            url_key("http://c/"),
        ];
        assert!(!repeated(&mut keys.clone()));
        keys.push(url_key("http://b/"));
        assert!(repeated(&mut keys));
    }

    #[test]
    fn metadata_counts_by_name_whatever_their_order_and_number() {
        for names in [3, 16, 17, 40] {
            let pairs = |order: &mut dyn Iterator<Item = usize>| {
                order
                    .map(|i| format!(r#""m{i:02}":["a{i}","b{i}"]"#))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let line =
                |m: String| format!(r#"{{"url":"http://e.example.com/a","metadata":{{{m}}}}}"#);
            let sorted = fp(&line(pairs(&mut (0..names))));
            assert_eq!(sorted, fp(&line(pairs(&mut (0..names).rev()))), "{names}");
            // A name's values keep their order: swapped, they are another record.
            let swapped =
                line(pairs(&mut (0..names).rev())).replace(r#"["a0","b0"]"#, r#"["b0","a0"]"#);
            assert_ne!(sorted, fp(&swapped), "{names}");
        }
    }

    #[test]
    fn values_cannot_run_into_each_other() {
        // Length prefixes: "ab" + "c" is not "a" + "bc".
        let one = fp(r#"{"url":"http://e.example.com/a","metadata":{"ab":"c"}}"#);
        let two = fp(r#"{"url":"http://e.example.com/a","metadata":{"a":"bc"}}"#);
        assert_ne!(one, two);
    }

    #[test]
    fn lines_are_found_across_pieces_and_errors_name_the_first_bad_one() {
        let chunk = "{\"url\":\"http://e.example.com/1\"}\n\n{\"url\":\"http://e.example.com/2\"}\n{\"url\":\"http://e.example.com/3\"}\n";
        for pieces in 1..5 {
            let (found, count) = fingerprint_jsonl(chunk.as_bytes(), pieces).unwrap();
            assert_eq!(count, 4);
            let rows: Vec<(String, String)> = serde_json::from_str(&found.rows()).unwrap();
            let lines: Vec<(usize, &str, &str)> = found
                .places()
                .iter()
                .zip(&rows)
                .map(|((line, span), (url, _))| (*line, url.as_str(), &chunk[span.clone()]))
                .collect();
            assert_eq!(
                lines,
                [
                    (
                        0,
                        "http://e.example.com/1",
                        "{\"url\":\"http://e.example.com/1\"}"
                    ),
                    (
                        2,
                        "http://e.example.com/2",
                        "{\"url\":\"http://e.example.com/2\"}"
                    ),
                    (
                        3,
                        "http://e.example.com/3",
                        "{\"url\":\"http://e.example.com/3\"}"
                    )
                ]
            );
        }
        let bad = "{\"url\":\"http://e.example.com/1\"}\n{\"conent\":1}\n{\"x\":1}\n";
        let delete = "{\"url\":\"http://e.example.com/1\",\"action\":\"delete\"}\n";
        let err = fingerprint_jsonl(delete.as_bytes(), 1).unwrap_err();
        assert!(err.to_string().contains("no deletes"), "{err}");
        for pieces in 1..4 {
            let err = fingerprint_jsonl(bad.as_bytes(), pieces).unwrap_err();
            assert!(err.to_string().contains("conent"), "{err}");
        }
    }
}
