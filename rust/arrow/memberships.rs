//! Arrow record batches as group memberships (`GroupsWriter.add_arrow`).
//!
//! A batch's columns are mapped to the fields of a membership by name once, with the readers
//! of record columns (`members` is read as an ACL's `principals`, or as JSON text as a content
//! feed's `acl` may be); then each row is read in
//! place and goes through the JSON Lines reader's checks (`MembershipInput::into_membership`),
//! so that a membership means the same whichever way it came.

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;

use crate::acl::Dialect;
use crate::error::{Error, RecordErrorKind, Result};
use crate::groups::{Membership, MembershipInput, FIELDS};
use crate::writer::{Item, SetKind};

use super::columns::Bytes;
use super::feed::Batch;
use super::nested::{optional_text, text_column, PrincipalLists};
use super::{booleans, mapped, required, unknown_column, Rows};

/// About how many bytes a member encodes to, its name aside (a `principal` element and its
/// attributes), and a membership, its members aside.
const MEMBER_BYTES: usize = 100;

/// A batch's columns, by membership field; `None` where the batch has no such column, or one
/// of the null type (all null).
#[derive(Default)]
pub struct Memberships {
    group: Option<Bytes>,
    namespace: Option<Bytes>,
    case_sensitive: Option<BooleanArray>,
    principal_type: Option<Bytes>,
    members: Option<Members>,
}

/// The `members` column: lists of structs, or each list as JSON text (`[{"name": ...}]`).
enum Members {
    Lists(Box<PrincipalLists>),
    Json(Bytes),
}

impl Memberships {
    fn take(&mut self, name: &str, array: &dyn Array) -> std::result::Result<(), String> {
        let text = || text_column(name, array).map(Some);
        match name {
            "group" => self.group = text()?,
            "namespace" => self.namespace = text()?,
            "principal_type" => self.principal_type = text()?,
            "case_sensitive" => self.case_sensitive = Some(booleans(name, array)?),
            "members" => {
                self.members = Some(match Bytes::new(array) {
                    Some((text, true)) => Members::Json(text),
                    _ => {
                        Members::Lists(Box::new(PrincipalLists::new(name, array, Dialect::Groups)?))
                    }
                })
            }
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
            Some(Members::Lists(lists)) => lists.get(row, "members"),
            Some(Members::Json(text)) => match text.text(row) {
                Ok(Some(text)) => {
                    serde_json::from_str(text).map_err(|e| e.to_string().replace('`', "'"))
                }
                Ok(None) => Ok(Vec::new()),
                Err(m) => Err(m.to_owned()),
            },
            None => Ok(Vec::new()),
        }
        .map_err(|m| Error::record(index, Some("members"), m))?;
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

impl Batch for Memberships {
    const MEMBERSHIPS: bool = true;

    /// Maps a batch's columns to the fields of a membership; refuses (naming it) a column that
    /// a membership does not have, or whose type cannot hold its field.
    fn new(batch: &RecordBatch) -> Result<Memberships> {
        let rows = mapped(batch, FIELDS, Memberships::take)?;
        required(batch, "group", "every membership names its group")?;
        required(
            batch,
            "members",
            "every group needs at least one member (the groups DTD has no empty group)",
        )?;
        Ok(rows)
    }

    fn weight(&self, row: usize) -> usize {
        MEMBER_BYTES
            + match &self.members {
                Some(Members::Lists(lists)) => MEMBER_BYTES * lists.count(row),
                // About what the members encode to: their JSON, less its quotes and braces.
                Some(Members::Json(text)) => text.len(row),
                None => 0,
            }
    }

    fn with_item(
        &self,
        row: usize,
        index: usize,
        encode: &mut dyn FnMut(Item<'_, '_>) -> Result<()>,
    ) -> Result<()> {
        encode(Item::Membership(&self.membership(row, index)?))
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
