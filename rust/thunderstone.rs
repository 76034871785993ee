//! Thunderstone Search Appliance data (`recvdata.xml`): a `ThunderstoneReplication` document
//! with one `<Item>` per record.
//!
//! Fields map as follows: `action` gives `Type` (add `I`, delete `D`, delete-pattern `DP`,
//! update `U`); metadata `title`, `description` and `category` (one value each) give `Title`,
//! `Description` and `Category`; `keywords` gives `Keywords`, values joined with ", "; every
//! other metadata value gives a `name: value` line of `Meta`, sorted by name. Text content is
//! `Body` (UTF-8), binary content `RawData`. Any text XML cannot carry goes as base64 with
//! `dt:dt="bin.base64"`, so nothing is dropped.

use crate::encode::{base64_into, Base64Stream, Scratch};
use crate::error::{Error, RecordErrorKind, Result};
use crate::escape::{escape_into, Context};
use crate::record::{parse_date, Action, Record, Source, Utf8Blocks};
use crate::spill::Sink;

pub const HEADER: &[u8] = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
    <ThunderstoneReplication xmlns:dt=\"urn:schemas-microsoft-com:datatypes\">\n";
pub const FOOTER: &[u8] = b"</ThunderstoneReplication>\n";

/// Writes `<Name>text</Name>`, or its base64 with `dt:dt="bin.base64"` when XML cannot
/// carry the text.
fn element(out: &mut Vec<u8>, name: &str, text: &str) {
    let mark = out.len();
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    if escape_into(out, text, Context::Text).is_err() {
        out.truncate(mark);
        binary(out, name, text.as_bytes());
        return;
    }
    close(out, name);
}

fn binary(out: &mut Vec<u8>, name: &str, bytes: &[u8]) {
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b" dt:dt=\"bin.base64\">");
    base64_into(out, bytes);
    close(out, name);
}

fn close(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b">\n");
}

/// Record fields a Thunderstone item has no place for: refused rather than dropped.
fn unsupported(r: &Record<'_>) -> Option<&'static str> {
    r.given_fields().find(|field| {
        matches!(
            *field,
            "displayurl"
                | "lock"
                | "authmethod"
                | "pagerank"
                | "crawl_immediately"
                | "crawl_once"
                | "acl"
                | "overwrite_acls"
                | "kind"
        )
    })
}

/// The one value of a metadata name that maps onto a single element.
fn single<'r>(index: usize, values: &[&'r str], name: &str) -> Result<Option<&'r str>> {
    match values {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        _ => Err(Error::record(
            index,
            Some("metadata"),
            format!(
                "'{name}' fills one Thunderstone field and takes one value, not {}",
                values.len()
            ),
        )),
    }
}

/// Checks a record for a Thunderstone item and appends the item to `out`.
pub fn encode_item(
    record: &Record<'_>,
    index: usize,
    scratch: &mut Scratch,
    out: &mut Vec<u8>,
) -> Result<()> {
    let err = |field: &'static str, msg: String| Error::record(index, Some(field), msg);
    if let Some(field) = unsupported(record) {
        return Err(Error::refused(
            RecordErrorKind::NotAllowed,
            index,
            Some(field),
            "has no counterpart in a Thunderstone item",
        ));
    }
    record.check_url(index)?;
    let action = record.action.unwrap_or(Action::Add);
    let deleting = matches!(action, Action::Delete | Action::DeletePattern);
    if deleting && (record.content.is_some() || !record.metadata.is_empty()) {
        return Err(err(
            "action",
            "a delete carries only the URL (or URL pattern)".into(),
        ));
    }
    let mut by_name: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (name, value) in &record.metadata {
        if name.is_empty() || value.is_empty() {
            return Err(err("metadata", "names and values must not be empty".into()));
        }
        by_name.entry(name).or_default().push(value);
    }
    let mut take = |name: &str| by_name.remove(name).unwrap_or_default();
    let title = single(index, &take("title"), "title")?;
    let description = single(index, &take("description"), "description")?;
    let category = single(index, &take("category"), "category")?;
    let keywords = take("keywords");
    if keywords.iter().any(|k| k.contains(',')) {
        return Err(err(
            "metadata",
            "Thunderstone keywords are comma-separated: a keyword holding ',' would be split"
                .into(),
        ));
    }
    let mut meta = String::new();
    for (name, values) in &by_name {
        if name.contains([':', '\n', '\r']) || values.iter().any(|v| v.contains(['\n', '\r'])) {
            return Err(err(
                "metadata",
                format!(
                    "'{name}' goes into Meta as 'name: value' lines, so neither may hold a line \
                     break, nor the name a ':'"
                ),
            ));
        }
        for value in values {
            meta.push_str(name);
            meta.push_str(": ");
            meta.push_str(value);
            meta.push('\n');
        }
    }
    let modified = match &record.last_modified {
        Some(ts) => Some(
            parse_date(ts)
                .map_err(|m| err("last_modified", m))?
                .0
                .format("%Y-%m-%d %H:%M:%S")
                .to_string(),
        ),
        None => None,
    };

    let start = out.len();
    out.extend_from_slice(b"<Item>\n<Type>");
    out.extend_from_slice(match action {
        Action::Add => b"I",
        Action::Delete => b"D",
        Action::DeletePattern => b"DP",
        Action::Update => b"U",
    });
    out.extend_from_slice(b"</Type>\n");
    // The content may be big (a file read a block at a time): from here on the item may be
    // moved out of memory.
    let Scratch {
        bytes: buf,
        opened,
        spill,
        ..
    } = scratch;
    let mut source = match &record.content {
        Some(content) => {
            let mimetype = record.mimetype(index)?;
            Some((
                content.source(index, mimetype, buf, opened.take())?,
                mimetype,
            ))
        }
        None => None,
    };
    let mut sink = Sink::new(out, start, spill);
    let out = &mut *sink.out;
    if let Some((source, _)) = &source {
        element(out, "Size", &source.len().to_string());
    }
    element(out, "Url", &record.url);
    if let Some(title) = title {
        element(out, "Title", title);
    }
    let text = match &mut source {
        Some((source, _)) => write_body(source, &mut sink)?,
        None => false,
    };
    if source
        .as_ref()
        .is_some_and(|(source, _)| source.leaves_memory())
    {
        sink.move_out_whole()?;
    }
    let out = &mut *sink.out;
    if !keywords.is_empty() {
        element(out, "Keywords", &keywords.join(", "));
    }
    if let Some(description) = description {
        element(out, "Description", description);
    }
    if !meta.is_empty() {
        element(out, "Meta", &meta);
    }
    if let Some(category) = category {
        element(out, "Category", category);
    }
    if let Some(modified) = &modified {
        element(out, "Modified", modified);
    }
    if !deleting {
        if let Some(mimetype) = record.mimetype.as_deref().or(source.as_ref().map(|r| r.1)) {
            element(out, "MimeType", mimetype);
        }
    }
    match &mut source {
        Some(_) if text => element(out, "Charset", "UTF-8"),
        Some((source, _)) => write_binary(source, "RawData", &mut sink)?,
        None => {}
    }
    sink.out.extend_from_slice(b"</Item>\n");
    sink.finish()
}

/// Writes the content as `Body` if it is text (in base64 if XML cannot carry it); returns
/// whether it was. A file is read a block at a time, and its `Body` taken back if it proves not
/// to be UTF-8.
fn write_body(source: &mut Source<'_>, sink: &mut Sink<'_>) -> Result<bool> {
    match source {
        Source::Memory { text: None, .. } => return Ok(false),
        Source::Memory {
            text: Some(text), ..
        } => {
            element(sink.out, "Body", text);
            return Ok(true);
        }
        Source::File(_) if source.is_text() == Some(false) => return Ok(false),
        Source::File(_) => {}
    }
    let mark = sink.len();
    sink.out.extend_from_slice(b"<Body>");
    let (mut utf8, mut escaped) = (Utf8Blocks::default(), true);
    let mut is_utf8 = true;
    source.blocks(|block, last| {
        is_utf8 = utf8
            .push(block, last, |piece| {
                // Once XML cannot carry it, the rest is only checked for UTF-8.
                if escaped {
                    escaped = escape_into(sink.out, piece, Context::Text).is_ok();
                }
                Ok(())
            })
            .is_ok();
        sink.relieve()?;
        Ok(is_utf8)
    })?;
    if !is_utf8 {
        sink.truncate(mark)?;
        return Ok(false);
    }
    if !escaped {
        sink.truncate(mark)?;
        write_binary(source, "Body", sink)?;
        return Ok(true);
    }
    close(sink.out, "Body");
    Ok(true)
}

/// Writes the content in base64 as element `name`, as `binary` does, a block at a time.
fn write_binary(source: &mut Source<'_>, name: &str, sink: &mut Sink<'_>) -> Result<()> {
    let Source::Memory { bytes, .. } = source else {
        sink.out.push(b'<');
        sink.out.extend_from_slice(name.as_bytes());
        sink.out.extend_from_slice(b" dt:dt=\"bin.base64\">");
        let mut base64 = Base64Stream::default();
        source.blocks(|block, _| {
            base64.push(sink.out, block);
            sink.relieve()?;
            Ok(true)
        })?;
        base64.finish(sink.out);
        close(sink.out, name);
        return Ok(());
    };
    binary(sink.out, name, bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Content, Timestamp};

    fn item(r: &Record<'_>) -> Result<String> {
        let mut out = Vec::new();
        encode_item(r, 0, &mut Scratch::new(1), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_big_file_is_read_in_blocks_and_its_item_moved_out_the_same_as_in_memory() {
        use crate::encode::IN_BLOCK;
        use crate::spill::Spill;
        let dir = tempfile::tempdir().unwrap();
        let mut noise = vec![0u8; 3_500_000];
        let mut x = 1u64;
        for b in noise.iter_mut() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (x >> 56) as u8;
        }
        let text = "caf\u{e9} \u{65e5} <&> ".repeat(IN_BLOCK / 8);
        let mut latin1 = text.clone().into_bytes();
        latin1.extend_from_slice(b"\xe9t\xe9");
        let cases: [(&str, &[u8], Content<'_>); 4] = [
            ("a.bin", &noise, Content::Bytes(noise.as_slice().into())),
            (
                "a.txt",
                text.as_bytes(),
                Content::Text(text.as_str().into()),
            ),
            // UTF-8 XML cannot carry: Body in base64.
            ("b.txt", b"\x01", Content::Text("\x01".into())),
            // Not UTF-8, though its type is text: RawData.
            ("c.txt", &latin1, Content::Bytes(latin1.as_slice().into())),
        ];
        for (name, bytes, in_memory) in cases {
            let path = dir.path().join(name);
            let bytes = if bytes.len() < IN_BLOCK {
                [bytes, text.as_bytes()].concat()
            } else {
                bytes.to_vec()
            };
            std::fs::write(&path, &bytes).unwrap();
            let in_memory = match in_memory {
                Content::Text(t) if t.len() < IN_BLOCK => {
                    Content::Text(String::from_utf8(bytes.clone()).unwrap().into())
                }
                other => other,
            };
            let record = |content| Record {
                url: "http://docs.example.com/a".into(),
                mimetype: Some(
                    if name.ends_with("bin") {
                        "application/pdf"
                    } else {
                        "text/plain"
                    }
                    .into(),
                ),
                content: Some(content),
                ..Default::default()
            };
            let want = item(&record(in_memory)).unwrap();
            let mut scratch = Scratch::new(1);
            scratch.spill = Spill::into_dir(dir.path().into());
            let mut out = b"<Item/>\n".to_vec();
            encode_item(&record(Content::Path(path)), 0, &mut scratch, &mut out).unwrap();
            let mut got = out[8..].to_vec();
            if let Some(spilled) = scratch.spill.take() {
                assert_eq!(out.len(), 8, "{name}: the item moved out whole");
                spilled
                    .copy_into(|b| {
                        got.extend_from_slice(b);
                        Ok(())
                    })
                    .unwrap();
            }
            assert!(got == want.as_bytes(), "{name}");
            assert!(scratch.spill.take().is_none());
            // Items past a spill's threshold leave memory.
            if name == "a.bin" {
                assert_eq!(out.len(), 8, "a big item is moved out");
            }
        }
    }

    #[test]
    fn fields_map_onto_an_item() {
        let r = Record {
            url: "http://www.example.com/dir/page.html".into(),
            metadata: vec![
                ("title".into(), "Sprocket <Specifications>".into()),
                ("keywords".into(), "sprockets".into()),
                ("keywords".into(), "gears".into()),
                ("author".into(), "Ann".into()),
                ("category".into(), "Mechanical".into()),
            ],
            last_modified: Some(Timestamp::Text("2005-10-25T11:21:07Z".into())),
            content: Some(Content::Text("caf\u{e9} & more".into())),
            mimetype: Some("text/html".into()),
            ..Default::default()
        };
        assert_eq!(
            item(&r).unwrap(),
            "<Item>\n<Type>I</Type>\n<Size>12</Size>\n<Url>http://www.example.com/dir/page.html</Url>\n\
             <Title>Sprocket &lt;Specifications&gt;</Title>\n<Body>caf\u{e9} &amp; more</Body>\n\
             <Keywords>sprockets, gears</Keywords>\n<Meta>author: Ann\n</Meta>\n\
             <Category>Mechanical</Category>\n<Modified>2005-10-25 11:21:07</Modified>\n\
             <MimeType>text/html</MimeType>\n<Charset>UTF-8</Charset>\n</Item>\n"
        );
    }

    #[test]
    fn binary_and_unsafe_text_go_base64() {
        let r = Record {
            url: "http://h.example.com/a.bin".into(),
            metadata: vec![("title".into(), "bell\u{7}".into())],
            content: Some(Content::Bytes(vec![0, 159, 255].into())),
            ..Default::default()
        };
        let xml = item(&r).unwrap();
        assert!(
            xml.contains("<Title dt:dt=\"bin.base64\">YmVsbAc=</Title>"),
            "{xml}"
        );
        assert!(
            xml.contains("<RawData dt:dt=\"bin.base64\">AJ//</RawData>"),
            "{xml}"
        );
        assert!(
            xml.contains("<MimeType>application/octet-stream</MimeType>"),
            "{xml}"
        );
    }

    #[test]
    fn deletes_and_patterns_carry_only_the_url() {
        let r = Record {
            url: "http://www.example.com/dir/*".into(),
            action: Some(Action::DeletePattern),
            ..Default::default()
        };
        assert_eq!(
            item(&r).unwrap(),
            "<Item>\n<Type>DP</Type>\n<Url>http://www.example.com/dir/*</Url>\n</Item>\n"
        );
    }

    #[test]
    fn what_an_item_cannot_hold_is_refused() {
        let r = Record {
            url: "http://h.example.com/".into(),
            pagerank: Some(80),
            ..Default::default()
        };
        assert!(item(&r)
            .unwrap_err()
            .to_string()
            .contains("field 'pagerank'"));
        let two_titles = Record {
            url: "http://h.example.com/".into(),
            metadata: vec![("title".into(), "a".into()), ("title".into(), "b".into())],
            ..Default::default()
        };
        assert!(item(&two_titles)
            .unwrap_err()
            .to_string()
            .contains("one value"));
    }
}
