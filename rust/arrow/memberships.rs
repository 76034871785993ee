//! Arrow record batches as group memberships (`GroupsWriter.add_arrow`).
//!
//! A batch's columns are mapped to the fields of a membership by name once, with the readers
//! of record columns (`members` is read as an ACL's `principals`); then each row is read in
//! place and goes through the JSON Lines reader's checks (`MembershipInput::into_membership`),
//! so that a membership means the same whichever way it came.

use std::fmt::Display;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;

use crate::acl::Dialect;
use crate::error::{Error, RecordErrorKind, Result};
use crate::groups::{Membership, MembershipInput, FIELDS};
use crate::writer::{BatchReport, FeedWriter, SetKind};

use super::columns::Bytes;
use super::feed::Unlocked;
use super::nested::{optional_text, text_column, PrincipalLists};
use super::{booleans, columns, required, unknown_column, Rows};

/// Rows read into memberships and taken at once: up to this many rows, or rows of this many
/// members in all (a member read is about 100 bytes, its name aside), enough to keep the
/// encoding threads busy and few enough to keep memory small.
const GROUP_ROWS: usize = 16_384;
const GROUP_MEMBERS: usize = 65_536;

/// A batch's columns, by membership field; `None` where the batch has no such column, or one
/// of the null type (all null).
#[derive(Default)]
struct Memberships {
    group: Option<Bytes>,
    namespace: Option<Bytes>,
    case_sensitive: Option<BooleanArray>,
    principal_type: Option<Bytes>,
    members: Option<PrincipalLists>,
}

impl Memberships {
    /// Maps a batch's columns to the fields of a membership; refuses (naming it) a column that
    /// a membership does not have, or whose type cannot hold its field.
    fn new(batch: &RecordBatch) -> Result<Memberships> {
        let mut rows = Memberships::default();
        for (name, array) in columns(batch, FIELDS)? {
            rows.take(name, array).map_err(Error::Config)?;
        }
        required(batch, "group", "every membership names its group")?;
        required(
            batch,
            "members",
            "every group needs at least one member (the groups DTD has no empty group)",
        )?;
        Ok(rows)
    }

    fn take(&mut self, name: &str, array: &dyn Array) -> std::result::Result<(), String> {
        let text = || text_column(name, array).map(Some);
        match name {
            "group" => self.group = text()?,
            "namespace" => self.namespace = text()?,
            "principal_type" => self.principal_type = text()?,
            "case_sensitive" => self.case_sensitive = Some(booleans(name, array)?),
            "members" => self.members = Some(PrincipalLists::new(name, array, Dialect::Groups)?),
            _ => return Err(unknown_column(name, FIELDS)),
        }
        Ok(())
    }

    /// The membership of `row`; `index` names it in errors.
    fn membership(&self, row: usize, index: usize) -> Result<Membership> {
        let text = |column, field| {
            optional_text(column, row).map_err(|m| Error::record(index, Some(field), m))
        };
        let Some(group) = text(&self.group, "group")? else {
            return Err(Error::refused(
                RecordErrorKind::Missing,
                index,
                Some("group"),
                "is null: every membership names its group",
            ));
        };
        let members = match &self.members {
            Some(lists) => lists
                .get(row, "members")
                .map_err(|m| Error::record(index, Some("members"), m))?,
            None => Vec::new(),
        };
        MembershipInput {
            group: group.to_owned(),
            namespace: text(&self.namespace, "namespace")?.map(str::to_owned),
            case_sensitive: self
                .case_sensitive
                .as_ref()
                .and_then(|c| c.is_valid(row).then(|| c.value(row))),
            principal_type: text(&self.principal_type, "principal_type")?.map(str::to_owned),
            members,
        }
        .into_membership(index)
    }
}

/// Checks the columns of `schema` as a writer of `set` reads them, before any row is read (so
/// that an empty stream's are checked too).
pub fn check_columns(set: SetKind, schema: SchemaRef) -> Result<()> {
    let empty = RecordBatch::new_empty(schema);
    match set {
        SetKind::Groups => Memberships::new(&empty).map(drop),
        SetKind::Feed | SetKind::Thunderstone => Rows::new(&empty).map(drop),
    }
}

/// Writes every row of `batches` as a membership, numbered from 0 across them, through
/// `writer`, as `add_batches` writes records: `unlocked` runs the writing, in which the rows are
/// read into memberships on the encoding threads (batches are read where this is called); a
/// refused row leaves every row before it written and none after it.
pub fn add_membership_batches<E: Display>(
    writer: &mut FeedWriter,
    batches: impl Iterator<Item = std::result::Result<RecordBatch, E>>,
    unlocked: impl Fn(&mut Unlocked<'_>) -> Result<BatchReport>,
) -> (BatchReport, Option<Error>) {
    let mut report = BatchReport::default();
    let mut index = 0;
    for batch in batches {
        let read = batch
            .map_err(|e| Error::Config(format!("cannot read the Arrow data: {e}")))
            .and_then(|batch| Ok((Memberships::new(&batch)?, batch.num_rows())));
        let (rows, len) = match read {
            Ok(read) => read,
            Err(e) => return (report, Some(e)),
        };
        // (index across the input, (row, members)), cut into groups.
        let mut items: Vec<(usize, (usize, usize))> = Vec::new();
        let mut members = 0;
        for row in 0..=len {
            let full = items.len() >= GROUP_ROWS || members >= GROUP_MEMBERS;
            if (full || row == len) && !items.is_empty() {
                let mut stop = None;
                let done = unlocked(&mut || {
                    let (done, error) = take(writer, &rows, &items);
                    stop = error;
                    Ok(done)
                });
                if let Ok(done) = done {
                    report.warnings.extend(done.warnings);
                    report.finished.extend(done.finished);
                }
                if stop.is_some() {
                    return (report, stop);
                }
                (items, members) = (Vec::new(), 0);
            }
            if row < len {
                let count = rows.members.as_ref().map_or(0, |m| m.count(row));
                members += count;
                items.push((index + row, (row, count)));
            }
        }
        index += len;
    }
    (report, None)
}

/// Writes the rows of `items`, read into memberships; on a refused one, writes those before it
/// and returns its error beside what was written.
fn take(
    writer: &mut FeedWriter,
    batch: &Memberships,
    items: &[(usize, (usize, usize))],
) -> (BatchReport, Option<Error>) {
    let mut add = |items| {
        writer.add_memberships_from(
            items,
            |&(_, members)| 1 + members,
            |index, &(row, _), encode| encode(&batch.membership(row, index)?),
        )
    };
    // Nothing of the items is written when one is refused: those before it are written again
    // without it.
    match add(items) {
        Err(error @ Error::Record { index, .. }) => {
            let before = items.partition_point(|&(i, _)| i < index);
            match add(&items[..before]) {
                Ok(done) => (done, Some(error)),
                Err(e) => (BatchReport::default(), Some(e)),
            }
        }
        Ok(done) => (done, None),
        Err(e) => (BatchReport::default(), Some(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
    use arrow_array::{ArrayRef, StringArray};
    use arrow_schema::{DataType, Field};

    use super::*;
    use crate::groups::parse_line;

    /// Members as a list of structs of `name` and `scope`, a row per list.
    fn members(rows: &[&[(&str, &str)]]) -> ArrayRef {
        let fields = vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("scope", DataType::Utf8, true),
        ];
        let mut list = ListBuilder::new(StructBuilder::from_fields(fields, 0));
        for row in rows {
            let items = list.values();
            for (name, scope) in *row {
                items
                    .field_builder::<StringBuilder>(0)
                    .unwrap()
                    .append_value(name);
                items
                    .field_builder::<StringBuilder>(1)
                    .unwrap()
                    .append_value(scope);
                items.append(true);
            }
            list.append(true);
        }
        Arc::new(list.finish())
    }

    #[test]
    fn a_row_is_the_membership_its_json_lines_line_is() {
        let groups: ArrayRef = Arc::new(StringArray::from(vec![Some("eng"), None]));
        let batch = RecordBatch::try_from_iter([
            ("group", groups),
            (
                "members",
                members(&[
                    &[("CORP\\alice", "user"), ("qa", "group")],
                    &[("bob", "user")],
                ]),
            ),
        ])
        .unwrap();
        let rows = Memberships::new(&batch).unwrap();
        let line = r#"{"group": "eng", "members": [{"name": "CORP\\alice", "scope": "user"},
            {"name": "qa", "scope": "group"}]}"#;
        assert_eq!(
            rows.membership(0, 7).unwrap(),
            parse_line(7, line.as_bytes()).unwrap()
        );
        let err = rows.membership(1, 8).unwrap_err();
        assert!(matches!(
            err,
            Error::Record {
                index: 8,
                field: Some("group"),
                kind: RecordErrorKind::Missing,
                ..
            }
        ));
    }
}
