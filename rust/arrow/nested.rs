//! Readers of the nested columns: `metadata` (a struct or a map of names to strings or lists
//! of strings) and `acl` (a struct shaped like the JSON object, or that object as JSON text).

use std::borrow::Cow;
use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BooleanArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, IntervalUnit, TimeUnit, UnionMode};

use crate::acl::{AclInput, Dialect, PrincipalInput};
use crate::jsonl::{given_twice, Metadata};
use crate::record::MetaPair;

use super::columns::{valid, Bytes, Offsets, Value};
use super::named_once;

/// Why the column `path` (`metadata.tags`) is refused, being of the wrong type.
pub(super) fn wrong_type(path: &str, array: &dyn Array, expected: &str) -> String {
    format!(
        "column '{path}' is {}: expected {expected}",
        type_name(array.data_type())
    )
}

/// A type as pyarrow users read it (`double`, `timestamp[ms, tz=UTC]`, `list_view<string>`),
/// not as Rust's `Debug` writes it (`Float64`, `ListView(Field { .. })`); a nested type names
/// its items' types, not their fields (`list<string>`).
pub fn type_name(t: &DataType) -> String {
    let name = match t {
        DataType::Null => "null",
        DataType::Boolean => "bool",
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::UInt8 => "uint8",
        DataType::UInt16 => "uint16",
        DataType::UInt32 => "uint32",
        DataType::UInt64 => "uint64",
        DataType::Float16 => "halffloat",
        DataType::Float32 => "float",
        DataType::Float64 => "double",
        DataType::Date32 => "date32[day]",
        DataType::Date64 => "date64[ms]",
        DataType::Interval(IntervalUnit::YearMonth) => "month_interval",
        DataType::Interval(IntervalUnit::DayTime) => "day_time_interval",
        DataType::Interval(IntervalUnit::MonthDayNano) => "month_day_nano_interval",
        DataType::Binary => "binary",
        DataType::LargeBinary => "large_binary",
        DataType::BinaryView => "binary_view",
        DataType::Utf8 => "string",
        DataType::LargeUtf8 => "large_string",
        DataType::Utf8View => "string_view",
        DataType::Struct(_) => "struct",
        DataType::Map(_, _) => "map",
        DataType::Union(_, UnionMode::Sparse) => "sparse_union",
        DataType::Union(_, UnionMode::Dense) => "dense_union",
        DataType::Timestamp(unit, None) => return format!("timestamp[{}]", unit_name(unit)),
        DataType::Timestamp(unit, Some(zone)) => {
            return format!("timestamp[{}, tz={zone}]", unit_name(unit))
        }
        DataType::Time32(unit) => return format!("time32[{}]", unit_name(unit)),
        DataType::Time64(unit) => return format!("time64[{}]", unit_name(unit)),
        DataType::Duration(unit) => return format!("duration[{}]", unit_name(unit)),
        DataType::FixedSizeBinary(size) => return format!("fixed_size_binary[{size}]"),
        DataType::Decimal32(precision, scale) => return format!("decimal32({precision}, {scale})"),
        DataType::Decimal64(precision, scale) => return format!("decimal64({precision}, {scale})"),
        DataType::Decimal128(precision, scale) => {
            return format!("decimal128({precision}, {scale})")
        }
        DataType::Decimal256(precision, scale) => {
            return format!("decimal256({precision}, {scale})")
        }
        DataType::List(item) => return format!("list<{}>", type_name(item.data_type())),
        DataType::LargeList(item) => return format!("large_list<{}>", type_name(item.data_type())),
        DataType::ListView(item) => return format!("list_view<{}>", type_name(item.data_type())),
        DataType::LargeListView(item) => {
            return format!("large_list_view<{}>", type_name(item.data_type()))
        }
        DataType::FixedSizeList(item, size) => {
            return format!("fixed_size_list<{}>[{size}]", type_name(item.data_type()))
        }
        DataType::Dictionary(_, values) => return format!("dictionary<{}>", type_name(values)),
        DataType::RunEndEncoded(ends, values) => {
            return format!(
                "run_end_encoded<{}, {}>",
                type_name(ends.data_type()),
                type_name(values.data_type())
            )
        }
    };
    name.to_owned()
}

/// A time unit as pyarrow writes it in a type's name (`timestamp[ms]`).
fn unit_name(unit: &TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

/// A text column's reader, or why the column `path` is not one.
pub(super) fn text_column(path: &str, array: &dyn Array) -> Result<Bytes, String> {
    match Bytes::new(array) {
        Some((bytes, true)) => Ok(bytes),
        _ => Err(wrong_type(
            path,
            array,
            "strings (string, large_string, string_view, or a dictionary of them)",
        )),
    }
}

/// A row's text in a column that may be absent (`None`), as in a null row.
pub(super) fn optional_text(column: &Option<Bytes>, row: usize) -> Value<'_, &str> {
    match column {
        Some(c) => c.text(row),
        None => Ok(None),
    }
}

/// The items of a list column, read by `items`.
pub(super) struct List<T> {
    offsets: Offsets,
    nulls: Option<NullBuffer>,
    items: T,
}

impl<T> List<T> {
    /// A list column's offsets, nulls and items (`None` for another type).
    fn new(
        array: &dyn Array,
        items: impl FnOnce(&dyn Array) -> Result<T, String>,
    ) -> Option<Result<List<T>, String>> {
        let (offsets, nulls, values) = match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                (
                    Offsets::Small(list.offsets().clone()),
                    list.nulls().cloned(),
                    list.values(),
                )
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                (
                    Offsets::Large(list.offsets().clone()),
                    list.nulls().cloned(),
                    list.values(),
                )
            }
            _ => return None,
        };
        Some(items(values.as_ref()).map(|items| List {
            offsets,
            nulls,
            items,
        }))
    }

    /// The positions of a row's items among `items`, `None` when the row is null.
    fn range(&self, row: usize) -> Result<Option<std::ops::Range<usize>>, &'static str> {
        if !valid(&self.nulls, row) {
            return Ok(None);
        }
        self.offsets.range(row).map(Some)
    }
}

/// A metadata value: one string, or a list of them.
pub(super) enum Values {
    One(Bytes),
    Many(List<Bytes>),
}

impl Values {
    fn new(path: &str, array: &dyn Array) -> Result<Values, String> {
        match List::new(array, |items| text_column(&format!("{path}[]"), items)) {
            Some(list) => list.map(Values::Many),
            None => Bytes::new(array)
                .and_then(|(bytes, text)| text.then_some(Values::One(bytes)))
                .ok_or_else(|| wrong_type(path, array, "strings or lists of strings")),
        }
    }

    /// Appends the (name, value) pairs of a name at `row` to `out`, in order; returns whether
    /// the name is there (null: absent; an empty list is there, without pairs).
    fn push<'a>(
        &'a self,
        name: &'a str,
        row: usize,
        out: &mut Vec<MetaPair<'a>>,
    ) -> Result<bool, String> {
        match self {
            Values::One(bytes) => Ok(match bytes.text(row)? {
                Some(v) => {
                    out.push((Cow::Borrowed(name), Cow::Borrowed(v)));
                    true
                }
                None => false,
            }),
            Values::Many(list) => {
                let Some(items) = list.range(row)? else {
                    return Ok(false);
                };
                for i in items {
                    match list.items.text(i)? {
                        Some(v) => out.push((Cow::Borrowed(name), Cow::Borrowed(v))),
                        None => return Err(format!("'{name}' holds a null in its list of values")),
                    }
                }
                Ok(true)
            }
        }
    }
}

/// The `metadata` column.
pub(super) enum Meta {
    /// A field per name, sorted by name; a null value leaves the name out.
    Struct {
        names: Vec<String>,
        values: Vec<Values>,
        nulls: Option<NullBuffer>,
    },
    /// Names and values per row.
    Map(Box<List<(Bytes, Values)>>),
}

impl Meta {
    pub(super) fn new(array: &dyn Array) -> Result<Meta, String> {
        match array.data_type() {
            DataType::Struct(fields) => {
                let columns = array.as_struct();
                let mut fields_found: Vec<(String, Values)> = Vec::new();
                for (field, column) in fields.iter().zip(columns.columns()) {
                    if fields.iter().filter(|f| f.name() == field.name()).count() > 1 {
                        return Err(given_twice(field.name()));
                    }
                    if column.data_type() == &DataType::Null {
                        continue; // a name without values
                    }
                    let path = format!("metadata.{}", field.name());
                    fields_found.push((field.name().clone(), Values::new(&path, column.as_ref())?));
                }
                // In the record's order once, not each row's.
                fields_found.sort_by(|a, b| a.0.cmp(&b.0));
                let (names, values) = fields_found.into_iter().unzip();
                Ok(Meta::Struct {
                    names,
                    values,
                    nulls: columns.nulls().cloned(),
                })
            }
            DataType::Map(_, _) => {
                let map = array.as_map();
                let entries = List {
                    offsets: Offsets::Small(map.offsets().clone()),
                    nulls: map.nulls().cloned(),
                    items: (
                        text_column("metadata.keys", map.keys().as_ref())?,
                        Values::new("metadata.values", map.values().as_ref())?,
                    ),
                };
                Ok(Meta::Map(Box::new(entries)))
            }
            _ => Err(wrong_type(
                "metadata",
                array,
                "a struct or a map of names to strings or lists of strings",
            )),
        }
    }

    /// The row's metadata in the record's form: (name, value) pairs sorted by name, a name's
    /// values in order.
    pub(super) fn get(&self, row: usize) -> Result<Option<Metadata<'_>>, String> {
        let mut pairs = Vec::new();
        match self {
            Meta::Struct {
                names,
                values,
                nulls,
            } => {
                if !valid(nulls, row) {
                    return Ok(None);
                }
                for (name, values) in names.iter().zip(values) {
                    values.push(name, row, &mut pairs)?;
                }
            }
            Meta::Map(entries) => {
                let Some(range) = entries.range(row)? else {
                    return Ok(None);
                };
                let (keys, values) = &entries.items;
                // Each name there, and where its pairs are among `found`.
                let mut found = Vec::new();
                let mut names = BTreeMap::new();
                for i in range {
                    let name = keys.text(i)?.ok_or("a name is null")?;
                    if names.contains_key(name) {
                        return Err(given_twice(name));
                    }
                    let start = found.len();
                    if values.push(name, i, &mut found)? {
                        names.insert(name, start..found.len());
                    }
                }
                for at in names.into_values() {
                    pairs.extend(found[at].iter_mut().map(std::mem::take));
                }
            }
        }
        Ok(Some(Metadata(pairs)))
    }
}

/// A principal's fields; `None` where the struct has no such field.
#[derive(Default)]
pub(super) struct Principals {
    nulls: Option<NullBuffer>,
    name: Option<Bytes>,
    scope: Option<Bytes>,
    access: Option<Bytes>,
    namespace: Option<Bytes>,
    case_sensitive: Option<BooleanArray>,
    principal_type: Option<Bytes>,
}

/// The `acl` column.
pub(super) enum Acl {
    /// The JSON object, as text.
    Json(Bytes),
    Struct(Box<AclFields>),
}

pub(super) struct AclFields {
    nulls: Option<NullBuffer>,
    principals: Option<PrincipalLists>,
    inheritance_type: Option<Bytes>,
    inherit_from: Option<Bytes>,
}

/// The fields of the struct column `path`, each given to `take` with its name, which refuses
/// a field it does not know by returning `None`; `known` lists those it knows. A field of the
/// null type (all null) is absent; a name given twice is refused.
fn fields_of(
    path: &str,
    array: &dyn Array,
    known: &str,
    mut take: impl FnMut(&str, &dyn Array) -> Option<Result<(), String>>,
) -> Result<Option<NullBuffer>, String> {
    let Some(columns) = array.as_struct_opt() else {
        return Err(wrong_type(path, array, &format!("a struct of {known}")));
    };
    named_once(&format!("{path}."), columns.fields())?;
    for (field, column) in columns.fields().iter().zip(columns.columns()) {
        let name = field.name().as_str();
        let taken = if column.data_type() == &DataType::Null {
            known.split(", ").any(|k| k == name).then_some(Ok(()))
        } else {
            take(name, column.as_ref())
        };
        taken.unwrap_or_else(|| {
            Err(format!(
                "column '{path}' has a field '{name}', which is not one of {known}"
            ))
        })?;
    }
    Ok(columns.nulls().cloned())
}

impl Acl {
    pub(super) fn new(array: &dyn Array) -> Result<Acl, String> {
        if let Some((bytes, true)) = Bytes::new(array) {
            return Ok(Acl::Json(bytes));
        }
        if array.as_struct_opt().is_none() {
            return Err(wrong_type(
                "acl",
                array,
                "a struct shaped like the JSON acl object, or that object as JSON text",
            ));
        }
        let (mut principals, mut inheritance_type, mut inherit_from) = (None, None, None);
        let text = |name: &str, a: &dyn Array| text_column(&format!("acl.{name}"), a);
        let nulls = fields_of(
            "acl",
            array,
            "principals, inheritance_type, inherit_from",
            |name, column| {
                Some(match name {
                    "principals" => PrincipalLists::new("acl.principals", column, Dialect::Feed)
                        .map(|p| principals = Some(p)),
                    "inheritance_type" => text(name, column).map(|t| inheritance_type = Some(t)),
                    "inherit_from" => text(name, column).map(|t| inherit_from = Some(t)),
                    _ => return None,
                })
            },
        )?;
        Ok(Acl::Struct(Box::new(AclFields {
            nulls,
            principals,
            inheritance_type,
            inherit_from,
        })))
    }

    pub(super) fn get<'a>(&'a self, row: usize) -> Result<Option<AclInput<'a>>, String> {
        let AclFields {
            nulls,
            principals,
            inheritance_type,
            inherit_from,
        } = match self {
            Acl::Json(bytes) => {
                return match bytes.text(row)? {
                    None => Ok(None),
                    Some(text) => serde_json::from_str(text)
                        .map(Some)
                        .map_err(|e| e.to_string().replace('`', "'")),
                }
            }
            Acl::Struct(fields) => fields.as_ref(),
        };
        if !valid(nulls, row) {
            return Ok(None);
        }
        Ok(Some(AclInput {
            principals: match principals {
                Some(list) => list.get(row, "principals")?,
                None => Vec::new(),
            },
            inheritance_type: optional_text(inheritance_type, row)?.map(str::to_owned),
            inherit_from: optional_text(inherit_from, row)?.map(str::to_owned),
            ..AclInput::default()
        }))
    }
}

/// A column of lists of principals: an ACL's `principals`, a group's `members`.
pub(super) struct PrincipalLists(List<Principals>);

impl PrincipalLists {
    /// The reader of the column `path` (`acl.principals`, named so in messages) of principals
    /// written for `dialect`.
    pub(super) fn new(
        path: &str,
        array: &dyn Array,
        dialect: Dialect,
    ) -> Result<PrincipalLists, String> {
        List::new(array, |items| {
            principals_of(&format!("{path}[]"), items, dialect)
        })
        .unwrap_or_else(|| Err(wrong_type(path, array, "a list of structs")))
        .map(PrincipalLists)
    }

    /// How many principals `row` lists (0 when unreadable).
    pub(super) fn count(&self, row: usize) -> usize {
        self.0.range(row).ok().flatten().map_or(0, |r| r.len())
    }

    /// The principals of `row`, none when it is null; `what` names the list in messages
    /// (`principals[0]: name is required`).
    pub(super) fn get(&self, row: usize, what: &str) -> Result<Vec<PrincipalInput<'_>>, String> {
        let PrincipalLists(list) = self;
        let p = &list.items;
        let text = optional_text;
        let mut found = Vec::new();
        for (n, i) in list.range(row)?.into_iter().flatten().enumerate() {
            let what = |m: &str| format!("{what}[{n}]: {m}");
            if !valid(&p.nulls, i) {
                return Err(what("is null"));
            }
            let required = |column, field| {
                text(column, i)?.ok_or_else(|| what(&format!("{field} is required")))
            };
            found.push(PrincipalInput {
                name: required(&p.name, "name")?.to_owned(),
                scope: Cow::Borrowed(required(&p.scope, "scope")?),
                access: text(&p.access, i)?.map(Cow::Borrowed),
                namespace: text(&p.namespace, i)?.map(str::to_owned),
                case_sensitive: p
                    .case_sensitive
                    .as_ref()
                    .and_then(|c| c.is_valid(i).then(|| c.value(i))),
                principal_type: text(&p.principal_type, i)?.map(Cow::Borrowed),
            });
        }
        Ok(found)
    }
}

/// The struct items of a list of principals written for `dialect`, `path` (`acl.principals[]`)
/// named in messages.
fn principals_of(path: &str, array: &dyn Array, dialect: Dialect) -> Result<Principals, String> {
    let mut p = Principals::default();
    // `[]` in every row makes a list of the null type.
    if array.data_type() == &DataType::Null {
        p.nulls = Some(NullBuffer::new_null(array.len()));
        return Ok(p);
    }
    let field = |name: &str| format!("{path}.{name}");
    let nulls = fields_of(
        path,
        array,
        // A group member has no access: its column is refused, not read to refuse each row.
        match dialect {
            Dialect::Feed => "name, scope, access, namespace, case_sensitive, principal_type",
            Dialect::Groups => "name, scope, namespace, case_sensitive, principal_type",
        },
        |name, column| {
            let text = || text_column(&field(name), column).map(Some);
            Some(match name {
                "name" => text().map(|t| p.name = t),
                "scope" => text().map(|t| p.scope = t),
                "access" if dialect == Dialect::Feed => text().map(|t| p.access = t),
                "namespace" => text().map(|t| p.namespace = t),
                "principal_type" => text().map(|t| p.principal_type = t),
                "case_sensitive" => match column.as_boolean_opt() {
                    Some(b) => {
                        p.case_sensitive = Some(b.clone());
                        Ok(())
                    }
                    None => Err(wrong_type(&field(name), column, "bool")),
                },
                _ => return None,
            })
        },
    )?;
    p.nulls = nulls;
    Ok(p)
}
