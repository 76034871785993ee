//! The JSON Lines record schema, parsed on the worker threads.
//!
//! Strings without escapes (base64 contents, most URLs) are borrowed from the input chunk;
//! errors name the field at fault, as a user reads it in the README.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;

use crate::acl::AclInput;
use crate::error::{Error, RecordErrorKind, Result};
use crate::lift;
use crate::record::{action_error, Action, AuthMethod, Content, Record, Timestamp};

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

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum RawTimestamp<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Epoch(f64),
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum MetaValue {
    One(String),
    Many(Vec<String>),
}

/// The metadata object, sorted by name. A name given twice is refused rather than letting the
/// last value win in silence: several values of one name are given as a list.
pub(crate) struct Metadata(pub(crate) BTreeMap<String, MetaValue>);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Names;
        impl<'de> serde::de::Visitor<'de> for Names {
            type Value = Metadata;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of names and values")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Metadata, M::Error> {
                let mut names = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    if names.contains_key(&name) {
                        return Err(serde::de::Error::custom(given_twice(&name)));
                    }
                    let value = map.next_value::<MetaValue>()?;
                    names.insert(name, value);
                }
                Ok(Metadata(names))
            }
        }
        deserializer.deserialize_map(Names)
    }
}

pub(crate) fn given_twice(name: &str) -> String {
    format!("the name '{name}' is given twice: give its values as one list")
}

/// A string borrowed from the input when it has no escapes (serde's `borrow` does not reach
/// through `Option<Cow>` by itself).
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A record as read, before its values are checked (the Arrow reader makes them too).
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRecord<'a> {
    pub(crate) url: Option<String>,
    pub(crate) action: Option<Cow<'a, str>>,
    pub(crate) mimetype: Option<String>,
    pub(crate) displayurl: Option<String>,
    #[serde(borrow)]
    pub(crate) last_modified: Option<RawTimestamp<'a>>,
    pub(crate) lock: Option<bool>,
    pub(crate) authmethod: Option<Cow<'a, str>>,
    pub(crate) pagerank: Option<i64>,
    pub(crate) crawl_immediately: Option<bool>,
    pub(crate) crawl_once: Option<bool>,
    // Sorted by name here already; the record keeps list order for repeated names.
    pub(crate) metadata: Option<Metadata>,
    #[serde(borrow)]
    pub(crate) content: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) content_base64: Option<Text<'a>>,
    pub(crate) content_path: Option<PathBuf>,
    #[serde(borrow)]
    pub(crate) acl: Option<AclInput<'a>>,
    pub(crate) overwrite_acls: Option<bool>,
    pub(crate) kind: Option<Cow<'a, str>>,
}

/// serde's messages end with a position inside the line, which the caller already names.
fn without_position(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

/// Parses one line (not blank) of a JSON Lines input; `index` names it in errors.
pub fn parse_line(index: usize, line: &[u8]) -> Result<Record<'_>> {
    let whole = || {
        let mut raw = parse_object::<RawRecord<'_>>(index, line, FIELDS)?;
        let (content, base64) = (raw.content.take(), raw.content_base64.take());
        into_record(
            index,
            raw,
            content.map(|t| Content::Text(t.0)),
            base64.map(|t| t.0),
        )
    };
    let Some(lifted) = lift::lift(line) else {
        return whole();
    };
    match parse_object::<RawRecord<'_>>(index, &lifted.rest, FIELDS) {
        Ok(raw) => into_record(
            index,
            raw,
            lifted.content.map(Content::Text),
            lifted.content_base64,
        ),
        // The line as a whole names what is wrong where it is (a bad byte's offset in the
        // line, not in what was left of it); errors are rare enough to parse it twice.
        Err(_) => whole(),
    }
}

/// Parses a line holding one JSON object of type `T`, whose top-level `fields` name errors.
pub(crate) fn parse_object<'a, T: Deserialize<'a>>(
    index: usize,
    line: &'a [u8],
    fields: &[&'static str],
) -> Result<T> {
    if line.starts_with("\u{feff}".as_bytes()) {
        return Err(Error::refused(
            RecordErrorKind::NotJson,
            index,
            None,
            "the line starts with a byte order mark (U+FEFF): save the file as UTF-8 without BOM",
        ));
    }
    // serde would take a JSON array for a struct, field by field.
    if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Error::refused(
            RecordErrorKind::NotJson,
            index,
            None,
            "expected a JSON object, one per line",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        json_error(index, line, &path, &err.into_inner(), fields)
    })?;
    // Trailing characters after the object make the line as a whole invalid.
    de.end()
        .map_err(|err| json_error(index, line, "", &err, fields))?;
    Ok(value)
}

/// What an unknown field is told: a typo is far likelier than a field of another schema, so the
/// one meant is named when there is one; else the fields are listed.
pub fn unknown_field(name: &str, fields: &[&'static str]) -> String {
    match closest(name, fields) {
        Some(meant) => format!("unknown field '{name}': did you mean '{meant}'?"),
        None => format!("unknown field '{name}' (fields: {})", fields.join(", ")),
    }
}

/// The field a mistyped name most likely meant: at most two edits away (one for short names).
fn closest(name: &str, fields: &[&'static str]) -> Option<&'static str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut previous = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let next = (previous + usize::from(ca != *cb))
                    .min(row[j] + 1)
                    .min(row[j + 1] + 1);
                previous = row[j + 1];
                row[j + 1] = next;
            }
        }
        row[b.len()]
    };
    let allowed = if name.chars().count() <= 4 { 1 } else { 2 };
    fields
        .iter()
        .map(|f| (distance(&name.to_lowercase(), f), *f))
        .filter(|(d, _)| *d <= allowed)
        .min()
        .map(|(_, f)| f)
}

/// Turns serde's error at `path` (like `metadata.tags[0]`) into one naming the top field.
fn json_error(
    index: usize,
    line: &[u8],
    path: &str,
    err: &serde_json::Error,
    fields: &[&'static str],
) -> Error {
    let top = path.split(['.', '[']).next().unwrap_or("");
    let mut message = without_position(&err.to_string())
        .replace("expected i64", "expected an integer")
        .replace("expected a boolean", "expected true or false")
        .replace("expected path string", "expected a file path")
        .replace('`', "'");
    let mut kind = RecordErrorKind::Invalid;
    if let Err(e) = std::str::from_utf8(line) {
        // serde says "invalid unicode code point"; say where the bad byte is.
        message = format!("not valid UTF-8 (byte {} of the line)", e.valid_up_to());
        kind = RecordErrorKind::NotJson;
    } else if let Some(unknown) = message
        .strip_prefix("unknown field '")
        .and_then(|rest| rest.split_once('\''))
        .map(|(name, _)| name.to_owned())
    {
        message = unknown_field(&unknown, fields);
        kind = RecordErrorKind::UnknownField;
    } else if message.starts_with("missing field") {
        kind = RecordErrorKind::Missing;
    }
    if let Some(field) = fields.iter().find(|f| **f == top) {
        let message = if message.contains("untagged enum RawTimestamp") {
            "expected a date string or a number".to_owned()
        } else if message.contains("untagged enum MetaValue") {
            format!(
                "'{}': expected a string or a list of strings",
                &path[top.len() + 1..]
            )
        } else {
            message
        };
        return Error::refused(kind, index, Some(field), message);
    }
    if err.is_data() || std::str::from_utf8(line).is_err() {
        return Error::refused(kind, index, None, message);
    }
    Error::refused(
        RecordErrorKind::NotJson,
        index,
        None,
        format!("not a JSON object: {message}"),
    )
}

/// The record of a parsed line; its contents are passed apart, as they may have been lifted
/// out of the line before parsing (`raw` then borrows from what was left), or be bytes (Arrow).
pub(crate) fn into_record<'a>(
    index: usize,
    raw: RawRecord<'_>,
    content: Option<Content<'a>>,
    content_base64: Option<Cow<'a, str>>,
) -> Result<Record<'a>> {
    let bad = |field: &'static str, msg: String| Error::record(index, Some(field), msg);
    let mut contents = Vec::with_capacity(1);
    if let Some(c) = content {
        contents.push(c);
    }
    if let Some(c) = content_base64 {
        contents.push(Content::Base64(c));
    }
    if let Some(p) = raw.content_path {
        contents.push(Content::Path(p));
    }
    if contents.len() > 1 {
        return Err(bad(
            "content",
            "give at most one of content, content_base64 and content_path".into(),
        ));
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
    let mut metadata = Vec::new();
    for (name, value) in raw.metadata.into_iter().flat_map(|m| m.0) {
        match value {
            MetaValue::One(v) => metadata.push((name, v)),
            MetaValue::Many(vs) => metadata.extend(vs.into_iter().map(|v| (name.clone(), v))),
        }
    }
    Ok(Record {
        url: raw.url.unwrap_or_default(),
        action,
        mimetype: raw.mimetype,
        displayurl: raw.displayurl,
        last_modified: raw.last_modified.map(|t| match t {
            RawTimestamp::Text(s) => Timestamp::Text(s.into_owned()),
            RawTimestamp::Epoch(secs) => Timestamp::Epoch(secs),
        }),
        lock: raw.lock,
        authmethod,
        pagerank: raw.pagerank,
        crawl_immediately: raw.crawl_immediately,
        crawl_once: raw.crawl_once,
        metadata,
        content: contents.pop(),
        acl,
        overwrite_acls: raw.overwrite_acls,
        standalone_acl,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: &str) -> String {
        parse_line(0, line.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn parses_every_field_and_borrows_plain_strings() {
        let line = br#"{"url":"http://a.example.com/","action":"delete","lock":true,"pagerank":80,
            "metadata":{"b":["2","1"],"a":"x"},"content_base64":"aGk=","last_modified":1700000000}"#;
        let r = parse_line(3, line).unwrap();
        assert_eq!(r.url, "http://a.example.com/");
        assert_eq!(
            (r.action, r.lock, r.pagerank),
            (Some(Action::Delete), Some(true), Some(80))
        );
        assert_eq!(
            r.metadata,
            [
                ("a".into(), "x".into()),
                ("b".into(), "2".into()),
                ("b".into(), "1".into())
            ]
        );
        assert!(matches!(
            r.content,
            Some(Content::Base64(Cow::Borrowed("aGk=")))
        ));
        assert!(matches!(r.last_modified, Some(Timestamp::Epoch(_))));
    }

    #[test]
    fn a_metadata_name_given_twice_is_refused_not_overwritten() {
        assert_eq!(
            err(r#"{"url":"x","metadata":{"k":"v1","k":"v2"}}"#),
            "record 0: field 'metadata': the name 'k' is given twice: give its values as one list"
        );
    }

    #[test]
    fn a_mistyped_field_is_named_with_the_one_meant() {
        assert_eq!(
            err(r#"{"url":"x","conent":"a"}"#),
            "record 0: unknown field 'conent': did you mean 'content'?"
        );
        assert!(err(r#"{"url":"x","Mimetype":"a"}"#).contains("did you mean 'mimetype'?"));
        assert!(err(r#"{"url":"x","zzzzzz":1}"#).contains("(fields: url, action,"));
    }

    #[test]
    fn a_byte_order_mark_is_named() {
        assert!(err("\u{feff}{\"url\":\"x\"}").contains("byte order mark"));
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            err(r#"{"url":"x","lock":"yes"}"#),
            "record 0: field 'lock': invalid type: string \"yes\", expected true or false"
        );
        assert!(err(r#"{"url":"x","colour":1}"#).contains("unknown field 'colour'"));
        assert!(err(r#"{"url":"x","metadata":{"a":5}}"#)
            .contains("field 'metadata': 'a': expected a string or a list"));
        assert!(err(r#"{"url":"x","last_modified":true}"#)
            .contains("field 'last_modified': expected a date"));
        assert!(err(r#"{"url":"x","action":"drop"}"#)
            .contains("field 'action': 'drop' is not an action"));
        assert!(err(r#"{"url":"x"} {}"#).contains("not a JSON object"));
        assert_eq!(err("[1]"), "record 0: expected a JSON object, one per line");
        assert_eq!(
            parse_line(0, b"{\"url\":\"\xff\"}")
                .unwrap_err()
                .to_string(),
            "record 0: field 'url': not valid UTF-8 (byte 8 of the line)"
        );
        // The same, after a long content that is read apart from the rest of the line.
        let mut line = format!(r#"{{"content":"{}","url":""#, "x".repeat(300)).into_bytes();
        line.extend_from_slice(b"\xff\"}");
        assert_eq!(
            parse_line(0, &line).unwrap_err().to_string(),
            "record 0: field 'url': not valid UTF-8 (byte 321 of the line)"
        );
    }

    /// The lines of a chunk, found another way.
    fn lines(chunk: &[u8]) -> (Vec<(usize, &[u8])>, usize) {
        let mut all: Vec<&[u8]> = chunk.split(|&b| b == b'\n').collect();
        if chunk.is_empty() || chunk.ends_with(b"\n") {
            all.pop();
        }
        let found = (all.iter().copied().enumerate())
            .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
            .collect();
        (found, all.len())
    }

    #[test]
    fn lines_skip_blanks_but_count_them() {
        let chunk = b"{}\n\n  \n{}\r\n{}";
        let (found, count) = lines_in(chunk, 0..chunk.len());
        assert_eq!(found.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 3, 4]);
        assert_eq!(found[2].1, b"{}");
        assert_eq!(count, 5);
        assert_eq!(lines_in(b"{}\n{}\n", 0..6).1, 2);
        assert_eq!(lines_in(b"\n", 0..1).1, 1);
        assert_eq!(lines_in(b"", 0..0).1, 0);
    }

    #[test]
    fn the_lines_of_all_pieces_are_the_lines_of_the_chunk_once_each() {
        let mut chunk = Vec::new();
        for n in 0..40usize {
            chunk.extend(std::iter::repeat_n(b'x', n * 17_001 % 300_000));
            chunk.extend_from_slice(if n % 3 == 0 { b"\n\n" } else { b"\n" });
        }
        for end in [
            chunk.len(),
            chunk.len() - 1,
            300_000,
            262_144,
            262_145,
            4097,
            1,
            0,
        ] {
            let chunk = &chunk[..end];
            for count in [1, 3, 16, 1000] {
                let mut joined = Vec::new();
                let mut total = 0;
                for part in pieces(chunk.len(), count) {
                    let (found, n) = lines_in(chunk, part);
                    joined.extend(found.into_iter().map(|(i, line)| (i + total, line)));
                    total += n;
                }
                assert_eq!(
                    (joined, total),
                    lines(chunk),
                    "{end} bytes in {count} pieces"
                );
            }
        }
        // Short lines (a directory's files, say) are shared out too.
        let line = br#"{"url":"http://f.example.com/lib/python3.11/json/decoder.py","content_path":"/usr/lib/python3.11/json/decoder.py"}"#;
        let short = [&line[..], b"\n"].concat().repeat(1000);
        let parts = pieces(short.len(), 16);
        assert!(parts.len() >= 8);
        assert!(parts.into_iter().all(|p| lines_in(&short, p).1 > 0));
    }
}
