//! Arrow record batches as records (`FeedWriter.add_arrow`).
//!
//! A batch's columns are mapped to the record schema by name once (`Rows::new`), refusing a
//! column of an unknown name or of a type that does not fit; then each row is read in place
//! into a record, on the encoding threads: text and bytes are borrowed from the Arrow buffers,
//! and a row's values go through the JSON Lines reader's checks (`jsonl::into_record`), so that
//! a record means the same whichever way it came.
//!
//! Arrow data crosses the C data interface unvalidated: each batch's lengths and buffers are
//! checked as it is imported (`import`), every offset where it is read (`columns`), and text
//! is checked to be UTF-8, so that a bad buffer refuses its batch or its row.

mod columns;
mod feed;
mod import;
mod memberships;
mod nested;

use std::borrow::Cow;
use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::{DataType, Fields};

use crate::error::{Error, Result};
use crate::jsonl::{into_record, unknown_field, Apart, RawRecord, RawTimestamp, FIELDS};
use crate::record::{Content, Record, Timestamp};
use crate::writer::Item;

use columns::{Bytes, Ints, Seconds};
use feed::Batch;
pub use feed::{add_batches, Unlocked};
pub use import::{batch, import, Stream};
pub use memberships::{check_columns, Memberships};
pub use nested::type_name;
use nested::{text_column, wrong_type, Acl, Meta};

/// A batch's columns, by record field; `None` where the batch has no such column, or one of
/// the null type (all null).
#[derive(Default)]
pub struct Rows {
    url: Option<Bytes>,
    action: Option<Bytes>,
    mimetype: Option<Bytes>,
    displayurl: Option<Bytes>,
    last_modified: Option<When>,
    lock: Option<BooleanArray>,
    authmethod: Option<Bytes>,
    pagerank: Option<Ints>,
    crawl_immediately: Option<BooleanArray>,
    crawl_once: Option<BooleanArray>,
    metadata: Option<Meta>,
    /// The content, and whether it is text (else bytes).
    content: Option<(Bytes, bool)>,
    content_base64: Option<Bytes>,
    content_path: Option<Bytes>,
    acl: Option<Acl>,
    overwrite_acls: Option<BooleanArray>,
    kind: Option<Bytes>,
}

/// `last_modified`: a date as text, or a moment.
enum When {
    Text(Bytes),
    Seconds(Seconds),
}

fn booleans(path: &str, array: &dyn Array) -> std::result::Result<BooleanArray, String> {
    array
        .as_boolean_opt()
        .cloned()
        .ok_or_else(|| wrong_type(path, array, "bool"))
}

impl Rows {
    fn take(&mut self, name: &str, array: &dyn Array) -> std::result::Result<(), String> {
        let text = || text_column(name, array).map(Some);
        match name {
            "url" => self.url = text()?,
            "action" => self.action = text()?,
            "mimetype" => self.mimetype = text()?,
            "displayurl" => self.displayurl = text()?,
            "authmethod" => self.authmethod = text()?,
            "content_base64" => self.content_base64 = text()?,
            "content_path" => self.content_path = text()?,
            "kind" => self.kind = text()?,
            "lock" => self.lock = Some(booleans(name, array)?),
            "crawl_immediately" => self.crawl_immediately = Some(booleans(name, array)?),
            "crawl_once" => self.crawl_once = Some(booleans(name, array)?),
            "overwrite_acls" => self.overwrite_acls = Some(booleans(name, array)?),
            "pagerank" => {
                self.pagerank =
                    Some(Ints::new(array).ok_or_else(|| wrong_type(name, array, "integers"))?)
            }
            "last_modified" => {
                self.last_modified = Some(match Bytes::new(array) {
                    Some((bytes, true)) => When::Text(bytes),
                    _ => When::Seconds(Seconds::new(array).ok_or_else(|| {
                        wrong_type(
                            name,
                            array,
                            "date strings, timestamps, dates, or numbers of seconds since the \
                             epoch",
                        )
                    })?),
                })
            }
            "content" => {
                self.content = Some(Bytes::new(array).ok_or_else(|| {
                    wrong_type(
                    name,
                    array,
                    "strings (text) or binary (bytes): plain, large, view, or a dictionary of them",
                )
                })?)
            }
            "metadata" => self.metadata = Some(Meta::new(array)?),
            "acl" => self.acl = Some(Acl::new(array)?),
            _ => return Err(unknown_column(name, FIELDS)),
        }
        Ok(())
    }

    /// The record of `row`; `index` names it in errors.
    pub fn record<'a>(&'a self, row: usize, index: usize) -> Result<Record<'a>> {
        let bad =
            |field: &'static str| move |message: String| Error::record(index, Some(field), message);
        let text = |column: &'a Option<Bytes>, field: &'static str| match column {
            Some(c) => c.text(row).map_err(|m| bad(field)(m.into())),
            None => Ok(None),
        };
        let owned = |column, field| text(column, field).map(|t| t.map(str::to_owned));
        let boolean = |column: &Option<BooleanArray>| {
            column
                .as_ref()
                .and_then(|c| c.is_valid(row).then(|| c.value(row)))
        };
        // Borrowed for the record's life, so given apart from the rest (`Apart`).
        let url = text(&self.url, "url")?.map(Cow::Borrowed);
        let pagerank = match self.pagerank.as_ref().and_then(|p| p.get(row)) {
            None => None,
            Some(rank) => Some(
                i64::try_from(rank)
                    .map_err(|_| bad("pagerank")(format!("{rank} is outside 68 to 100")))?,
            ),
        };
        let last_modified = match &self.last_modified {
            None => None,
            Some(When::Text(t)) => t
                .text(row)
                .map_err(|m| bad("last_modified")(m.into()))?
                .map(|t| RawTimestamp(Timestamp::Text(t.to_owned()))),
            Some(When::Seconds(s)) => s.get(row).map(|s| RawTimestamp(Timestamp::Epoch(s))),
        };
        let metadata = match &self.metadata {
            Some(m) => m.get(row).map_err(bad("metadata"))?,
            None => None,
        };
        let raw = RawRecord {
            url: None,
            action: text(&self.action, "action")?.map(Cow::Borrowed),
            mimetype: owned(&self.mimetype, "mimetype")?,
            displayurl: owned(&self.displayurl, "displayurl")?,
            last_modified,
            lock: boolean(&self.lock),
            authmethod: text(&self.authmethod, "authmethod")?.map(Cow::Borrowed),
            pagerank,
            crawl_immediately: boolean(&self.crawl_immediately),
            crawl_once: boolean(&self.crawl_once),
            metadata: None,
            content: None,
            content_base64: None,
            content_path: text(&self.content_path, "content_path")?.map(PathBuf::from),
            acl: match &self.acl {
                Some(a) => a.get(row).map_err(bad("acl"))?,
                None => None,
            },
            overwrite_acls: boolean(&self.overwrite_acls),
            kind: text(&self.kind, "kind")?.map(Cow::Borrowed),
        };
        let content = match &self.content {
            None => None,
            Some((bytes, true)) => bytes
                .text(row)
                .map_err(|m| bad("content")(m.into()))?
                .map(|t| Content::Text(Cow::Borrowed(t))),
            Some((bytes, false)) => bytes
                .get(row)
                .map_err(|m| bad("content")(m.into()))?
                .map(|b| Content::Bytes(Cow::Borrowed(b))),
        };
        let content_base64 = text(&self.content_base64, "content_base64")?.map(Cow::Borrowed);
        into_record(
            index,
            raw,
            Apart {
                content,
                content_base64,
                url,
                metadata,
            },
        )
    }
}

impl Batch for Rows {
    const MEMBERSHIPS: bool = false;

    /// Maps a batch's columns to the record fields; refuses (naming it) a column the schema
    /// does not have, or whose type cannot hold its field.
    fn new(batch: &RecordBatch) -> Result<Rows> {
        let rows = mapped(batch, FIELDS, Rows::take)?;
        required(batch, "url", "every record needs its URL")?;
        Ok(rows)
    }

    /// As `Record::weight` says.
    fn weight(&self, row: usize) -> usize {
        let len = |column: &Option<Bytes>| column.as_ref().map_or(0, |c| c.len(row));
        len(&self.url)
            + self.content.as_ref().map_or(0, |(c, _)| c.len(row))
            + len(&self.content_base64)
    }

    fn with_item(
        &self,
        row: usize,
        index: usize,
        encode: &mut dyn FnMut(Item<'_, '_>) -> Result<()>,
    ) -> Result<()> {
        encode(Item::Record(&self.record(row, index)?))
    }
}

fn unknown_column(name: &str, fields: &[&str]) -> String {
    // "unknown field 'x': did you mean...": a column, here.
    unknown_field(name, fields).replacen("field", "column", 1)
}

/// The columns of `batch` by name, but those of the null type (all null, as absent); refuses a
/// name given twice, and one of the null type not among `fields` (the others are refused by
/// their reader, which knows their types).
fn columns<'b>(batch: &'b RecordBatch, fields: &[&str]) -> Result<Vec<(&'b str, &'b dyn Array)>> {
    let schema = batch.schema_ref();
    named_once("", schema.fields()).map_err(Error::Config)?;
    let mut found = Vec::new();
    for (field, array) in schema.fields().iter().zip(batch.columns()) {
        let name = field.name().as_str();
        if array.data_type() != &DataType::Null {
            found.push((name, array.as_ref()));
        } else if !fields.contains(&name) {
            return Err(Error::Config(unknown_column(name, fields)));
        }
    }
    Ok(found)
}

/// The columns of `batch` mapped by `take`, in turn, into a reader of its rows; a column it
/// refuses (by name or type) refuses the batch.
fn mapped<T: Default>(
    batch: &RecordBatch,
    fields: &[&str],
    take: fn(&mut T, &str, &dyn Array) -> std::result::Result<(), String>,
) -> Result<T> {
    let mut rows = T::default();
    for (name, array) in columns(batch, fields)? {
        take(&mut rows, name, array).map_err(Error::Config)?;
    }
    Ok(rows)
}

/// Refuses a name given twice among `fields` (the columns of a batch, `prefix` empty, or the
/// fields of the struct column `prefix`, `members[].`): Arrow allows it, yet only one of them
/// would be read, and the others lost in silence.
fn named_once(prefix: &str, fields: &Fields) -> std::result::Result<(), String> {
    for (i, field) in fields.iter().enumerate() {
        if fields[..i].iter().any(|f| f.name() == field.name()) {
            return Err(format!("column '{prefix}{}' is given twice", field.name()));
        }
    }
    Ok(())
}

/// Refuses `batch` without a column `name`, saying `why` it is needed.
fn required(batch: &RecordBatch, name: &str, why: &str) -> Result<()> {
    match batch.schema_ref().field_with_name(name) {
        Ok(_) => Ok(()),
        Err(_) => Err(Error::Config(format!("there is no '{name}' column: {why}"))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, BinaryArray, Int64Array, StringArray, StructArray};
    use arrow_buffer::Buffer;
    use arrow_data::ArrayData;

    use arrow_schema::Field;

    use super::*;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn a_row_borrows_its_content_url_and_metadata_from_the_arrow_buffers() {
        let content = BinaryArray::from(vec![Some(&b"\x00\xff"[..]), None]);
        let authors: ArrayRef = Arc::new(StringArray::from(vec![Some("ann"), None]));
        let metadata = StructArray::from(vec![(
            Arc::new(Field::new("author", DataType::Utf8, true)),
            authors,
        )]);
        let b = batch(vec![
            (
                "url",
                Arc::new(StringArray::from(vec![
                    "http://a.example.com/",
                    "http://b.example.com/",
                ])),
            ),
            ("content", Arc::new(content.clone())),
            ("pagerank", Arc::new(Int64Array::from(vec![Some(80), None]))),
            ("metadata", Arc::new(metadata)),
        ]);
        let rows = Rows::new(&b).unwrap();
        let r = rows.record(0, 7).unwrap();
        assert_eq!((&*r.url, r.pagerank), ("http://a.example.com/", Some(80)));
        assert!(matches!(r.url, Cow::Borrowed(_)));
        match &r.metadata[..] {
            [(Cow::Borrowed("author"), Cow::Borrowed("ann"))] => {}
            other => panic!("not borrowed: {other:?}"),
        }
        match r.content {
            Some(Content::Bytes(Cow::Borrowed(bytes))) => {
                assert_eq!(bytes.as_ptr(), content.value(0).as_ptr())
            }
            other => panic!("not borrowed: {other:?}"),
        }
        let r = rows.record(1, 8).unwrap();
        assert!(r.content.is_none() && r.pagerank.is_none() && r.metadata.is_empty());
    }

    #[test]
    fn an_offset_out_of_bounds_refuses_the_row_instead_of_reading_astray() {
        // Offsets past the end of the values, as a broken producer could export them.
        let data = ArrayData::builder(DataType::Utf8)
            .len(1)
            .add_buffer(Buffer::from_slice_ref([0i32, 1000]))
            .add_buffer(Buffer::from_slice_ref(b"abc"));
        // SAFETY: deliberately invalid, as data from the C data interface is not validated.
        let urls = StringArray::from(unsafe { data.build_unchecked() });
        let rows = Rows::new(&batch(vec![("url", Arc::new(urls))])).unwrap();
        let err = rows.record(0, 3).unwrap_err().to_string();
        assert_eq!(
            err,
            "record 3: field 'url': the Arrow data is malformed (an offset or index out of bounds)"
        );
    }

    /// URLs as a producer that does not validate could export them: each row of `split` ends
    /// with the first byte of "é" and the next row starts with its second (the values as a
    /// whole are UTF-8 there); each row of `broken` ends with a byte UTF-8 never has.
    fn urls_not_all_utf8(rows: usize, split: &[usize], broken: &[usize]) -> StringArray {
        let (mut offsets, mut values) = (vec![0i32], Vec::new());
        for row in 0..rows {
            if row > 0 && split.contains(&(row - 1)) {
                values.push(0xA9);
            }
            values.extend_from_slice(format!("http://a.example.com/{row}").as_bytes());
            if split.contains(&row) {
                values.push(0xC3);
            }
            if broken.contains(&row) {
                values.push(0xFF);
            }
            offsets.push(values.len() as i32);
        }
        let data = ArrayData::builder(DataType::Utf8)
            .len(rows)
            .add_buffer(Buffer::from_slice_ref(offsets))
            .add_buffer(Buffer::from_slice_ref(values));
        // SAFETY: deliberately invalid, as data from the C data interface is not validated.
        StringArray::from(unsafe { data.build_unchecked() })
    }

    #[test]
    fn text_checked_by_blocks_of_rows_still_refuses_each_row_that_is_not_utf8() {
        let urls = urls_not_all_utf8(200, &[70, 130], &[10]);
        // Rows 64 to 95, checked together: UTF-8 as a whole, but two rows are not.
        let (offsets, values) = (urls.value_offsets(), urls.value_data());
        assert!(std::str::from_utf8(&values[offsets[64] as usize..offsets[96] as usize]).is_ok());
        let rows = Rows::new(&batch(vec![("url", Arc::new(urls))])).unwrap();
        for row in 0..200 {
            let read = rows.record(row, row).map(|r| r.url);
            if [10, 70, 71, 130, 131].contains(&row) {
                assert_eq!(
                    read.unwrap_err().to_string(),
                    format!("record {row}: field 'url': is not valid UTF-8")
                );
            } else {
                assert_eq!(read.unwrap(), format!("http://a.example.com/{row}"));
            }
        }
    }

    #[test]
    fn columns_are_refused_by_name_and_type_before_any_row() {
        let err = |columns| match Rows::new(&batch(columns)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        let urls: ArrayRef = Arc::new(StringArray::from(vec!["http://a.example.com/"]));
        assert_eq!(
            err(vec![("url", urls.clone()), ("mimetpye", urls.clone())]),
            "unknown column 'mimetpye': did you mean 'mimetype'?"
        );
        assert_eq!(
            err(vec![
                ("url", urls),
                ("lock", Arc::new(Int64Array::from(vec![1])))
            ]),
            "column 'lock' is int64: expected bool"
        );
    }
}
