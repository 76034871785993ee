//! Arrow record batches as group memberships (`GroupsWriter.add_arrow`).
//!
//! A batch's columns are mapped to the fields of a membership by name once, with the readers
//! of record columns (`members` is read as an ACL's `principals`); then each row is read in
//! place and goes through the JSON Lines reader's checks (`MembershipInput::into_membership`),
//! so that a membership means the same whichever way it came.

use std::fmt::Display;
use std::ops::Range;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;

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
            "members" => self.members = Some(PrincipalLists::new(name, array)?),
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
/// `writer`, as `add_batches` writes records: `unlocked` runs the reading of rows and the
/// writing (batches are read where this is called); a refused row leaves every row before it
/// written and none after it.
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
        let mut start = 0;
        while start < len {
            let (mut end, mut members) = (start, 0);
            while end < len && end - start < GROUP_ROWS && members < GROUP_MEMBERS {
                members += rows.members.as_ref().map_or(0, |m| m.count(end));
                end += 1;
            }
            let group = start..end;
            let mut stop = None;
            let done = unlocked(&mut || {
                let (done, error) = take(writer, &rows, group.clone(), index + start);
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
            start = end;
        }
        index += len;
    }
    (report, None)
}

/// Reads `rows` (the first named `first` in errors) into memberships and writes them; on a
/// refused one, writes those before it and returns its error beside what was written.
fn take(
    writer: &mut FeedWriter,
    batch: &Memberships,
    rows: Range<usize>,
    first: usize,
) -> (BatchReport, Option<Error>) {
    let mut memberships = Vec::with_capacity(rows.len());
    let mut stop = None;
    for row in rows {
        match batch.membership(row, first + memberships.len()) {
            Ok(membership) => memberships.push(membership),
            Err(e) => {
                stop = Some(e);
                break;
            }
        }
    }
    // `add_memberships` writes nothing of a slice with a refused membership, which it names
    // by its place in the slice: the ones before it are written again without it.
    let mut written = writer.add_memberships(&memberships);
    if let Err(Error::Record { index, .. }) = written {
        stop = written.err().map(|e| e.shifted(first));
        written = writer.add_memberships(&memberships[..index]);
    }
    match written {
        Ok(mut done) => {
            done.warnings.iter_mut().for_each(|(i, _)| *i += first);
            (done, stop)
        }
        Err(e) => (BatchReport::default(), Some(e)),
    }
}
