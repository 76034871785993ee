//! The JSON Lines record schema, parsed on the worker threads.
//!
//! Strings without escapes (base64 contents, most URLs) are borrowed from the input chunk;
//! errors name the field at fault, as a user reads it in the README.

use std::borrow::Cow;
use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;

use crate::acl::AclInput;
use crate::error::{Error, RecordErrorKind, Result};
use crate::lift;
use crate::record::{action_error, Action, AuthMethod, Content, MetaPair, Record, Timestamp};

mod refusal;

use refusal::json_error;
pub use refusal::{unknown_field, ReadError};

/// The record fields, for naming them in errors with a `'static` name. Every reader of records
/// takes its field list from here: the dict reader of the batch API, the seedlist store and
/// the `Record` TypedDict (through `_core.RECORD_FIELDS`, checked by tests/test_layout.py).
pub const FIELDS: &[&str] = &[
    "url",
    "action",
    "mimetype",
    "displayurl",
    "last_modified",
    "lock",
    "authmethod",
    "pagerank",
    "crawl_immediately",
    "crawl_once",
    "metadata",
    "content",
    "content_base64",
    "content_path",
    "acl",
    "overwrite_acls",
    "kind",
];

/// `last_modified` as given: a date string or seconds since the epoch.
pub(crate) struct RawTimestamp(pub(crate) Timestamp);

impl<'de> Deserialize<'de> for RawTimestamp {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Either;
        impl serde::de::Visitor<'_> for Either {
            type Value = RawTimestamp;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(TIMESTAMP)
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(RawTimestamp(Timestamp::Text(v.to_owned())))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E> {
                Ok(RawTimestamp(Timestamp::Epoch(v as f64)))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E> {
                Ok(RawTimestamp(Timestamp::Epoch(v as f64)))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Self::Value, E> {
                Ok(RawTimestamp(Timestamp::Epoch(v)))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// What `RawTimestamp` expects, which its errors end with.
const TIMESTAMP: &str = "a date string or a number";

/// A `last_modified` value read alone, as a record's is read (for `parse_last_modified`).
pub fn read_timestamp<'de, D>(deserializer: D) -> std::result::Result<Timestamp, String>
where
    D: serde::Deserializer<'de, Error = ReadError>,
{
    RawTimestamp::deserialize(deserializer)
        .map(|t| t.0)
        .map_err(|e| e.to_string().replace('`', "'"))
}

/// The metadata object, as (name, value) pairs sorted by name, a name's values in their order. A
/// name given twice is refused rather than letting the last value win in silence: several values
/// of one name are given as a list.
pub(crate) struct Metadata<'a>(pub(crate) Vec<MetaPair<'a>>);

impl<'de> Deserialize<'de> for Metadata<'static> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Names;
        impl<'de> serde::de::Visitor<'de> for Names {
            type Value = Metadata<'static>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of names and values")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Metadata<'static>, M::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                // Where each name's values start, to find a name given twice.
                let mut firsts = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    let first = pairs.len();
                    map.next_value_seed(Values {
                        name: Cow::Owned(name),
                        pairs: &mut pairs,
                    })?;
                    if pairs.len() > first {
                        firsts.push(first);
                    }
                }
                if firsts.len() > 1 {
                    firsts.sort_unstable_by(|a, b| pairs[*a].0.cmp(&pairs[*b].0));
                    if let Some(twice) = firsts.windows(2).find(|w| pairs[w[0]].0 == pairs[w[1]].0)
                    {
                        return Err(serde::de::Error::custom(given_twice(&pairs[twice[0]].0)));
                    }
                    pairs.sort_by(|a, b| a.0.cmp(&b.0));
                }
                Ok(Metadata(pairs))
            }
        }
        deserializer.deserialize_map(Names)
    }
}

/// Why a metadata name was refused (JSON Lines, dicts and Arrow data alike).
pub(crate) fn given_twice(name: &str) -> String {
    format!("the name '{name}' is given twice: give its values as one list")
}

/// A metadata name's value: one string, or a list of them, each paired with the name.
struct Values<'p> {
    name: Cow<'static, str>,
    pairs: &'p mut Vec<MetaPair<'static>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Values<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Values<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string or a list of strings")
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<(), E> {
        self.pairs.push((self.name, Cow::Owned(v.to_owned())));
        Ok(())
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<(), E> {
        self.pairs.push((self.name, Cow::Owned(v)));
        Ok(())
    }
    fn visit_seq<S: serde::de::SeqAccess<'de>>(
        self,
        mut seq: S,
    ) -> std::result::Result<(), S::Error> {
        while let Some(v) = seq.next_element::<String>()? {
            self.pairs.push((self.name.clone(), Cow::Owned(v)));
        }
        Ok(())
    }
}

/// A string borrowed from the input when it has no escapes (serde's `borrow` does not reach
/// through `Option<Cow>` by itself).
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// `content`: text, or bytes, which a Python dict can hold and JSON cannot.
pub(crate) struct RawContent<'a>(Content<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for RawContent<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Either<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Either<'a> {
            type Value = RawContent<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string, or bytes from Python")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(RawContent(Content::Text(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(RawContent(Content::Text(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Self::Value, E> {
                Ok(RawContent(Content::Text(Cow::Owned(v))))
            }
            fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> std::result::Result<Self::Value, E> {
                Ok(RawContent(Content::Bytes(Cow::Borrowed(v))))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> std::result::Result<Self::Value, E> {
                Ok(RawContent(Content::Bytes(Cow::Owned(v.to_vec()))))
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> std::result::Result<Self::Value, E> {
                Ok(RawContent(Content::Bytes(Cow::Owned(v))))
            }
        }
        deserializer.deserialize_str(Either(std::marker::PhantomData))
    }
}

/// A record as given, in JSON Lines or a Python dict (see `bindings::dict`): the one definition
/// of the record schema. `FIELDS` lists its fields (a test keeps them the same).
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRecord<'a> {
    pub(crate) url: Option<String>,
    pub(crate) action: Option<Cow<'a, str>>,
    pub(crate) mimetype: Option<String>,
    pub(crate) displayurl: Option<String>,
    pub(crate) last_modified: Option<RawTimestamp>,
    pub(crate) lock: Option<bool>,
    pub(crate) authmethod: Option<Cow<'a, str>>,
    pub(crate) pagerank: Option<i64>,
    pub(crate) crawl_immediately: Option<bool>,
    pub(crate) crawl_once: Option<bool>,
    // Sorted by name here already; the record keeps list order for repeated names.
    pub(crate) metadata: Option<Metadata<'static>>,
    #[serde(borrow)]
    pub(crate) content: Option<RawContent<'a>>,
    #[serde(borrow)]
    pub(crate) content_base64: Option<Text<'a>>,
    pub(crate) content_path: Option<PathBuf>,
    #[serde(borrow)]
    pub(crate) acl: Option<AclInput<'a>>,
    pub(crate) overwrite_acls: Option<bool>,
    pub(crate) kind: Option<Cow<'a, str>>,
}

/// What a record may borrow for its whole life, passed to `into_record` apart from the rest:
/// contents read apart from it, where serde read `null` (see `lift`); the URL and metadata of
/// a row of Arrow data, borrowed from its buffers (`None`: as the rest gives them).
#[derive(Default)]
pub(crate) struct Apart<'a> {
    pub(crate) content: Option<Content<'a>>,
    pub(crate) content_base64: Option<Cow<'a, str>>,
    pub(crate) url: Option<Cow<'a, str>>,
    pub(crate) metadata: Option<Metadata<'a>>,
}

/// Parses one line (not blank) of a JSON Lines input; `index` names it in errors.
pub fn parse_line(index: usize, line: &[u8]) -> Result<Record<'_>> {
    let whole = || {
        let mut raw = parse_object::<RawRecord<'_>>(index, line, FIELDS)?;
        let apart = raw.take_contents();
        into_record(index, raw, apart)
    };
    let Some(lifted) = lift::lift(line) else {
        return whole();
    };
    // What is wrong with the line is wrong with what is left of it, where the lifted contents
    // stand as `null`: they were well-formed strings. Parsing the whole line again to say so
    // copied a content with escapes twice more (into serde's scratch, then out of it), beside
    // the lifted one: a refused line of 300 MB, 200 MB of content with escapes, took 928 MB.
    match parse_part::<RawRecord<'_>>(index, &lifted.rest, line, FIELDS)? {
        raw if raw.content.is_none() && raw.content_base64.is_none() => {
            let apart = Apart {
                content: lifted.content.map(Content::Text),
                content_base64: lifted.content_base64,
                ..Apart::default()
            };
            into_record(index, raw, apart)
        }
        // A content left beside a lifted one of the other kind (the same kind twice is a
        // duplicate field): the whole line is refused for that first (see `into_record`).
        _ => Err(two_contents(index)),
    }
}

/// A record read by another serde deserializer than JSON's (a Python dict's, see
/// `bindings::dict`), by the same schema and checks; its errors say where they are. `apart`
/// gives a `content` it read apart from the rest (where serde read `null`), if any.
pub fn read_record<'de, D>(
    index: usize,
    deserializer: D,
    apart: impl FnOnce() -> Option<Content<'de>>,
) -> Result<Record<'de>>
where
    D: serde::Deserializer<'de, Error = ReadError>,
{
    let mut raw = RawRecord::deserialize(deserializer).map_err(|e| e.refusal(index, FIELDS))?;
    let mut contents = raw.take_contents();
    if let Some(content) = apart() {
        contents.content = Some(content);
    }
    into_record(index, raw, contents)
}

/// The byte order mark, which some editors put at the start of a UTF-8 file.
const BOM: &str = "\u{feff}";

/// Parses a line holding one JSON object of type `T`, whose top-level `fields` name errors.
pub(crate) fn parse_object<'a, T: Deserialize<'a>>(
    index: usize,
    line: &'a [u8],
    fields: &[&'static str],
) -> Result<T> {
    parse_part(index, line, line, fields)
}

/// As `parse_object`, for `part`, which is `line` or what `lift` left of it: a bad byte is
/// named by its offset in `line` (the lifted strings are valid UTF-8, so a line is valid
/// exactly when what is left of it is).
fn parse_part<'a, T: Deserialize<'a>>(
    index: usize,
    part: &'a [u8],
    line: &[u8],
    fields: &[&'static str],
) -> Result<T> {
    if part.starts_with(BOM.as_bytes()) {
        return Err(Error::refused(
            RecordErrorKind::NotJson,
            index,
            None,
            "the line starts with a byte order mark (U+FEFF): save the file as UTF-8 without BOM",
        ));
    }
    // serde would take a JSON array for a struct, field by field.
    if part.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Error::refused(
            RecordErrorKind::NotJson,
            index,
            None,
            "expected a JSON object, one per line",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(part);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        json_error(index, line, &path, &err.into_inner(), fields)
    })?;
    // Trailing characters after the object make the line as a whole invalid.
    de.end()
        .map_err(|err| json_error(index, line, "", &err, fields))?;
    Ok(value)
}

impl<'a> RawRecord<'a> {
    /// Its contents, taken out to be passed to `into_record` with any read apart.
    fn take_contents(&mut self) -> Apart<'a> {
        Apart {
            content: self.content.take().map(|c| c.0),
            content_base64: self.content_base64.take().map(|t| t.0),
            ..Apart::default()
        }
    }
}

/// The record of `raw`, checked; its contents are passed apart, as they may have been read
/// apart from the rest (`raw` then borrows from what was left, see `lift`).
pub(crate) fn into_record<'a>(
    index: usize,
    raw: RawRecord<'_>,
    apart: Apart<'a>,
) -> Result<Record<'a>> {
    debug_assert!(raw.content.is_none() && raw.content_base64.is_none());
    let bad = |field: &'static str, msg: String| Error::record(index, Some(field), msg);
    let content_path = raw.content_path.map(Content::Path);
    let content_base64 = apart.content_base64.map(Content::Base64);
    let given = [&apart.content, &content_base64, &content_path];
    if given.iter().filter(|c| c.is_some()).count() > 1 {
        return Err(two_contents(index));
    }
    let action = match raw.action.as_deref() {
        None => None,
        Some(a) => Some(Action::parse(a).ok_or_else(|| bad("action", action_error(a)))?),
    };
    let authmethod = match raw.authmethod.as_deref() {
        None => None,
        Some(m) => Some(AuthMethod::parse(m).ok_or_else(|| {
            bad(
                "authmethod",
                format!("'{m}' is not one of none, httpbasic, ntlm, httpsso"),
            )
        })?),
    };
    let standalone_acl = match raw.kind.as_deref() {
        None | Some("document") => false,
        Some("acl") => true,
        Some(other) => return Err(bad("kind", format!("'{other}' is not document or acl"))),
    };
    let acl = raw
        .acl
        .map(AclInput::into_acl)
        .transpose()
        .map_err(|m| bad("acl", m))?;
    Ok(Record {
        url: apart.url.or(raw.url.map(Cow::Owned)).unwrap_or_default(),
        action,
        mimetype: raw.mimetype,
        displayurl: raw.displayurl,
        last_modified: raw.last_modified.map(|t| t.0),
        lock: raw.lock,
        authmethod,
        pagerank: raw.pagerank,
        crawl_immediately: raw.crawl_immediately,
        crawl_once: raw.crawl_once,
        metadata: apart
            .metadata
            .or(raw.metadata)
            .map(|m| m.0)
            .unwrap_or_default(),
        content: apart.content.or(content_base64).or(content_path),
        acl,
        overwrite_acls: raw.overwrite_acls,
        standalone_acl,
    })
}

/// The refusal of a record given more than one content, the first thing `into_record` checks.
fn two_contents(index: usize) -> Error {
    Error::record(
        index,
        Some("content"),
        "give at most one of content, content_base64 and content_path",
    )
}

/// A chunk cut into `count` equal parts or so (none smaller than 4 KB), to share among
/// threads. The cuts fall anywhere: each thread takes the lines that start in its part (see
/// `lines_in`), so that finding line ends, the first read of a mapped input with its page
/// faults, is done on the threads and not before them.
pub fn pieces(len: usize, count: usize) -> Vec<Range<usize>> {
    let count = count.min(len / 4096).max(1);
    let cut = |i: usize| len * i / count;
    (0..count).map(|i| cut(i)..cut(i + 1)).collect()
}

/// Whether a chunk may name files by `content_path`: only such chunks are worth planning
/// line by line (see `cut_by_cost`).
pub fn names_files(chunk: &[u8]) -> bool {
    memchr::memmem::find(chunk, CONTENT_PATH).is_some()
}

const CONTENT_PATH: &[u8] = b"\"content_path\"";

/// The `content_path` a line names, if any, read without parsing the line: a path without
/// escapes is taken as it is, others are left to serde. For planning only: the line's own parse
/// says what is wrong with it.
fn content_path_of(line: &[u8]) -> Option<PathBuf> {
    #[derive(Deserialize)]
    struct Named {
        content_path: Option<PathBuf>,
    }
    let after = memchr::memmem::find(line, CONTENT_PATH)? + CONTENT_PATH.len();
    let value = line[after..].trim_ascii_start().strip_prefix(b":")?;
    let value = value.trim_ascii_start().strip_prefix(b"\"")?;
    match memchr::memchr2(b'"', b'\\', value) {
        Some(end) if value[end] == b'"' => {
            std::str::from_utf8(&value[..end]).ok().map(PathBuf::from)
        }
        _ => serde_json::from_slice::<Named>(line).ok()?.content_path,
    }
}

/// A part of a chunk, to encode on one thread: the lines that start in `lines`, what they cost,
/// and what the planner made of the files they name, each by the start of its line.
pub struct Part<T> {
    pub lines: Range<usize>,
    pub cost: u64,
    pub files: Vec<(usize, T)>,
}

/// The lines of a chunk that start in `lines` (which starts and ends at line starts), cut at line
/// starts into about `count` parts of equal cost: a line costs its bytes, plus the size of the
/// file it names, as `open` tells (given the named files in order, it returns each one's size
/// and what it made of it). A record that names a file is much heavier than its line: cut by
/// bytes of JSON, one part would hold most of the work.
pub fn cut_by_cost<T>(
    chunk: &[u8],
    lines: Range<usize>,
    count: usize,
    open: impl FnOnce(&[&std::path::Path]) -> Vec<(u64, T)>,
) -> Vec<Part<T>> {
    cut_within(chunk, lines, count, open, None).0
}

/// How much of the files a chunk names one round of its encoding may still take (see
/// `cut_within`).
#[derive(Clone, Copy, Debug)]
pub struct FileBudget {
    /// A file at least this big makes a record that is moved out of memory (`spill`).
    pub big: u64,
    /// The bytes and number of such files left.
    pub bytes: u64,
    pub files: usize,
    /// The bytes of smaller files left: their records wait in memory.
    pub held: u64,
    /// The files of any size left: the plan holds each one's path and opening, in the heap of
    /// its thread, which keeps what it took.
    pub named: usize,
    /// The files the round took so far, and their bytes, whatever the waves its plan came in:
    /// until it took one, a file may pass what is left (a round takes one line at least), and
    /// after, none may. Their mean guesses what the files being opened will take (`room_for`).
    pub taken: (usize, u64),
}

impl FileBudget {
    /// Whether a file of `size` bytes stays within what is left, or is the round's first.
    fn fits(&self, size: u64) -> bool {
        let within = match size < self.big {
            true => size <= self.held,
            false => size <= self.bytes && self.files > 0,
        };
        within || self.taken.0 == 0
    }

    /// Takes the size of a file (in any order: what fits together fits in any order); false
    /// if it did not fit.
    pub fn take(&mut self, size: u64) -> bool {
        let fits = self.fits(size);
        if size < self.big {
            self.held = self.held.saturating_sub(size);
        } else {
            self.bytes = self.bytes.saturating_sub(size);
            self.files = self.files.saturating_sub(1);
        }
        self.taken = (self.taken.0 + 1, self.taken.1 + size);
        fits
    }

    /// Whether `count` more files, as big as the files taken so far on average, would fit:
    /// how many files to open at once without opening those past the budget, whose sizes are
    /// known only once they are open. Before any is taken, one only (it always fits).
    pub fn room_for(&self, count: usize) -> bool {
        let Some(mean) = self.taken.1.checked_div(self.taken.0 as u64) else {
            return count <= 1;
        };
        let mut left = *self;
        (0..count).all(|_| left.take(mean))
    }
}

/// As `cut_by_cost`, for the first lines of `lines` only when `budget` is given: those before
/// the line whose file would pass what is left of it (one line at least if the budget took
/// none yet), which they take from it, and before the first file `open` left out, if it gives
/// only the first ones.
/// Returns the parts, and where the lines left out start (`lines.end` when none is).
pub fn cut_within<T>(
    chunk: &[u8],
    lines: Range<usize>,
    count: usize,
    open: impl FnOnce(&[&std::path::Path]) -> Vec<(u64, T)>,
    mut budget: Option<&mut FileBudget>,
) -> (Vec<Part<T>>, usize) {
    let mut ends = Vec::new();
    let mut costs = Vec::new();
    let mut named = Vec::new();
    // The round's first line is taken whatever it names.
    let most = budget.as_deref().map_or(usize::MAX, |b| match b.taken.0 {
        0 => b.named.max(1),
        _ => b.named,
    });
    let mut start = lines.start;
    while start < lines.end {
        let end = memchr::memchr(b'\n', &chunk[start..]).map_or(chunk.len(), |k| start + k + 1);
        if let Some(path) = content_path_of(&chunk[start..end]) {
            if named.len() >= most {
                break;
            }
            named.push((costs.len(), start, path));
        }
        ends.push(end);
        costs.push((end - start) as u64);
        start = end;
    }
    if let Some(b) = budget.as_deref_mut() {
        b.named = b.named.saturating_sub(named.len());
    }
    let paths: Vec<&std::path::Path> = named.iter().map(|(_, _, p)| p.as_path()).collect();
    let mut files = Vec::with_capacity(named.len());
    let opened = open(&paths);
    // The lines from the first file `open` left out, or not looked at, are left for another
    // round.
    let mut taken = named
        .get(opened.len())
        .map_or(start.min(lines.end), |(_, start, _)| *start);
    for ((line, start, _), (size, file)) in named.iter().zip(opened) {
        if let Some(b) = budget.as_deref_mut() {
            if !b.fits(size) {
                // This file and those after are closed, and opened again in their round.
                taken = *start;
                break;
            }
            b.take(size);
        }
        costs[*line] += size;
        files.push((*start, file));
    }
    // The lines left out (their files closed) are planned in a round of their own.
    let kept = ends.partition_point(|&end| end <= taken);
    ends.truncate(kept);
    costs.truncate(kept);
    let target = costs.iter().sum::<u64>() / count.max(1) as u64;
    let mut parts = Vec::new();
    let (mut from, mut sum, mut start) = (lines.start, 0, lines.start);
    for (end, cost) in ends.into_iter().zip(costs) {
        // A heavy line goes alone rather than at the end of a part already full enough.
        if sum > 0 && sum + cost > target {
            parts.push((from..start, sum));
            (from, sum) = (start, 0);
        }
        sum += cost;
        if sum >= target {
            parts.push((from..end, sum));
            (from, sum) = (end, 0);
        }
        start = end;
    }
    // None if it takes no line: a wave whose round the waves before filled.
    if from < taken {
        parts.push((from..taken, sum));
    }
    let mut files = files.into_iter().peekable();
    let parts = parts
        .into_iter()
        .map(|(lines, cost)| Part {
            files: std::iter::from_fn(|| files.next_if(|(at, _)| lines.contains(at))).collect(),
            lines,
            cost,
        })
        .collect();
    (parts, taken)
}

/// The non-blank lines of `chunk` that start in `part` (a line starts at 0 or after a newline;
/// it may end past the part), with their index among those lines, blank ones counted, so that
/// errors can name the input line; and how many lines start in the part.
pub fn lines_in(chunk: &[u8], part: Range<usize>) -> (Vec<(usize, &[u8])>, usize) {
    let mut start = match part.start {
        0 => 0,
        at => memchr::memchr(b'\n', &chunk[at - 1..]).map_or(chunk.len(), |k| at + k),
    };
    let mut count = 0;
    let mut out = Vec::new();
    while start < part.end {
        let end = memchr::memchr(b'\n', &chunk[start..]).map_or(chunk.len(), |k| start + k);
        let line = &chunk[start..end];
        if !line.iter().all(u8::is_ascii_whitespace) {
            out.push((count, line));
        }
        count += 1;
        start = end + 1;
    }
    (out, count)
}

/// Whether `line`, the last of an input that ends without a newline, may be a record cut short:
/// the input ends in the middle of it (a copy or download cut, a full disk), and whatever
/// followed is lost. Refused as a bad record, `--on-error skip` would build a feed short of it
/// and of every record after the cut, which as a full feed deletes them. A line that is whole
/// JSON needs no newline (many tools leave the last one out), and is refused, if it is, for what
/// is wrong with it (a byte order mark, no object), as with a newline. Any other is taken as cut,
/// whatever else is wrong with it: a cut can follow a fault (a bad value, a raw tab in a string)
/// or fall inside a byte order mark, and only the end of the line says it broke off. Read
/// without keeping anything of the line.
pub fn cut_short(line: &[u8]) -> bool {
    // A part of a byte order mark is no JSON: the start of a file cut there.
    let json = line.strip_prefix(BOM.as_bytes()).unwrap_or(line);
    !json.iter().all(u8::is_ascii_whitespace)
        && serde_json::from_slice::<serde::de::IgnoredAny>(json).is_err()
}

#[cfg(test)]
mod tests;
