//! Rows of Arrow data as JSON Lines records: what `rejected.jsonl` holds of a refused row, to
//! be fixed and fed again, and what a sync's snapshot reads of a Parquet or Arrow file.
//!
//! A row's record reads as `arrow::Rows` reads the row: a null column is an absent field,
//! binary `content` is `content_base64`, a moment (timestamp, date) is its seconds since the
//! epoch rounded down, a map is an object (or a list of `[name, value]` pairs when a name
//! repeats, which an object cannot hold).

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrowPrimitiveType, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::arrow::{check_columns, type_name};
use crate::error::{Error, Result};
use crate::writer::SetKind;

/// Every row of `batch` as a JSON Lines record, appended to `out`.
///
/// The columns are checked first as `add_arrow` of a writer of `set` checks them (names and types
/// of record fields, or a membership's), then the data (offsets in bounds, text UTF-8, dictionary keys in range): Arrow data
/// from another library crosses the C data interface unchecked.
pub fn write_rows(batch: &RecordBatch, set: SetKind, out: &mut Vec<u8>) -> Result<()> {
    check_columns(set, batch.schema())?;
    for column in batch.columns() {
        column
            .to_data()
            .validate_full()
            .map_err(|e| Error::Config(format!("cannot read the Arrow data: {e}")))?;
    }
    for row in 0..batch.num_rows() {
        serde_json::to_writer(&mut *out, &Row { batch, row })
            .map_err(|e| Error::Config(format!("cannot write row {row} as JSON: {e}")))?;
        out.push(b'\n');
    }
    Ok(())
}

struct Row<'a> {
    batch: &'a RecordBatch,
    row: usize,
}

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let schema = self.batch.schema();
        for (field, column) in schema.fields().iter().zip(self.batch.columns()) {
            let value = Value(column.as_ref(), self.row);
            if value.is_null() {
                continue;
            }
            let name = field.name().as_str();
            match column.data_type() {
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView
                    if name == "content" =>
                {
                    map.serialize_entry("content_base64", &Base64(value))?
                }
                _ => map.serialize_entry(name, &value)?,
            }
        }
        map.end()
    }
}

/// The value of an array at a row.
#[derive(Clone, Copy)]
struct Value<'a>(&'a dyn Array, usize);

impl<'a> Value<'a> {
    fn is_null(self) -> bool {
        let Value(array, row) = self;
        match array.data_type() {
            DataType::Null => true,
            DataType::Dictionary(_, _) => match key(array, row) {
                Some(key) => Value(array.as_any_dictionary().values().as_ref(), key).is_null(),
                None => true,
            },
            _ => array.is_null(row),
        }
    }

    /// A binary or text value's bytes.
    fn bytes(self) -> Option<&'a [u8]> {
        let Value(array, row) = self;
        Some(match array.data_type() {
            DataType::Binary => array.as_binary::<i32>().value(row),
            DataType::LargeBinary => array.as_binary::<i64>().value(row),
            DataType::BinaryView => array.as_binary_view().value(row),
            DataType::Utf8 => array.as_string::<i32>().value(row).as_bytes(),
            DataType::LargeUtf8 => array.as_string::<i64>().value(row).as_bytes(),
            DataType::Utf8View => array.as_string_view().value(row).as_bytes(),
            DataType::Dictionary(_, _) => {
                return Value(
                    array.as_any_dictionary().values().as_ref(),
                    key(array, row)?,
                )
                .bytes()
            }
            _ => return None,
        })
    }
}

/// A dictionary's key at `row`, `None` when null.
fn key(array: &dyn Array, row: usize) -> Option<usize> {
    let keys = array.as_any_dictionary().keys();
    if keys.is_null(row) {
        return None;
    }
    fn at<T: ArrowPrimitiveType>(keys: &dyn Array, row: usize) -> Option<usize>
    where
        T::Native: TryInto<usize>,
    {
        keys.as_primitive::<T>().value(row).try_into().ok()
    }
    match keys.data_type() {
        DataType::Int8 => at::<Int8Type>(keys, row),
        DataType::Int16 => at::<Int16Type>(keys, row),
        DataType::Int32 => at::<Int32Type>(keys, row),
        DataType::Int64 => at::<Int64Type>(keys, row),
        DataType::UInt8 => at::<UInt8Type>(keys, row),
        DataType::UInt16 => at::<UInt16Type>(keys, row),
        DataType::UInt32 => at::<UInt32Type>(keys, row),
        DataType::UInt64 => at::<UInt64Type>(keys, row),
        _ => None,
    }
}

/// Binary content as base64 text.
struct Base64<'a>(Value<'a>);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let bytes = self.0.bytes().unwrap_or_default();
        serializer.serialize_str(&base64_simd::STANDARD.encode_to_string(bytes))
    }
}

fn number<T: ArrowPrimitiveType>(array: &dyn Array, row: usize) -> T::Native {
    array.as_primitive::<T>().value(row)
}

/// Seconds since the epoch, rounded down, of a value counted in `per_second`ths of one.
fn seconds(value: i64, per_second: i64) -> i64 {
    value.div_euclid(per_second)
}

impl Serialize for Value<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let Value(array, row) = *self;
        if self.is_null() {
            return s.serialize_none();
        }
        match array.data_type() {
            DataType::Boolean => s.serialize_bool(array.as_boolean().value(row)),
            DataType::Int8 => s.serialize_i8(number::<Int8Type>(array, row)),
            DataType::Int16 => s.serialize_i16(number::<Int16Type>(array, row)),
            DataType::Int32 => s.serialize_i32(number::<Int32Type>(array, row)),
            DataType::Int64 => s.serialize_i64(number::<Int64Type>(array, row)),
            DataType::UInt8 => s.serialize_u8(number::<UInt8Type>(array, row)),
            DataType::UInt16 => s.serialize_u16(number::<UInt16Type>(array, row)),
            DataType::UInt32 => s.serialize_u32(number::<UInt32Type>(array, row)),
            DataType::UInt64 => s.serialize_u64(number::<UInt64Type>(array, row)),
            DataType::Float16 => s.serialize_f32(number::<Float16Type>(array, row).to_f32()),
            DataType::Float32 => s.serialize_f32(number::<Float32Type>(array, row)),
            DataType::Float64 => s.serialize_f64(number::<Float64Type>(array, row)),
            DataType::Timestamp(unit, _) => s.serialize_i64(match unit {
                TimeUnit::Second => number::<TimestampSecondType>(array, row),
                TimeUnit::Millisecond => {
                    seconds(number::<TimestampMillisecondType>(array, row), 1_000)
                }
                TimeUnit::Microsecond => {
                    seconds(number::<TimestampMicrosecondType>(array, row), 1_000_000)
                }
                TimeUnit::Nanosecond => {
                    seconds(number::<TimestampNanosecondType>(array, row), 1_000_000_000)
                }
            }),
            DataType::Date32 => {
                s.serialize_i64(i64::from(number::<Date32Type>(array, row)) * 86_400)
            }
            DataType::Date64 => s.serialize_i64(seconds(number::<Date64Type>(array, row), 1_000)),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                let text = self.bytes().unwrap_or_default();
                s.serialize_str(std::str::from_utf8(text).map_err(S::Error::custom)?)
            }
            DataType::Dictionary(_, _) => match key(array, row) {
                Some(key) => Value(array.as_any_dictionary().values().as_ref(), key).serialize(s),
                None => s.serialize_none(),
            },
            DataType::Struct(fields) => {
                let columns = array.as_struct();
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (field, column) in fields.iter().zip(columns.columns()) {
                    map.serialize_entry(field.name(), &Value(column.as_ref(), row))?;
                }
                map.end()
            }
            DataType::List(_) => list(s, array.as_list::<i32>().value(row).as_ref()),
            DataType::LargeList(_) => list(s, array.as_list::<i64>().value(row).as_ref()),
            DataType::FixedSizeList(_, _) => {
                list(s, array.as_fixed_size_list().value(row).as_ref())
            }
            DataType::Map(_, _) => {
                let entries = array.as_map().value(row);
                let (names, values) = (entries.column(0).as_ref(), entries.column(1).as_ref());
                let len = entries.len();
                let mut seen = HashSet::with_capacity(len);
                let unique = (0..len).all(|i| seen.insert(Value(names, i).bytes()));
                if unique {
                    let mut map = s.serialize_map(Some(len))?;
                    for i in 0..len {
                        map.serialize_entry(&Value(names, i), &Value(values, i))?;
                    }
                    map.end()
                } else {
                    let mut seq = s.serialize_seq(Some(len))?;
                    for i in 0..len {
                        seq.serialize_element(&(Value(names, i), Value(values, i)))?;
                    }
                    seq.end()
                }
            }
            // Binary other than `content` (which `Row` writes as base64), among others: no
            // record field's type (`Rows::new` refused the batch).
            other => Err(S::Error::custom(format!(
                "a value of type {} has no JSON form here",
                type_name(other)
            ))),
        }
    }
}

fn list<S: Serializer>(s: S, items: &dyn Array) -> std::result::Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(items.len()))?;
    for i in 0..items.len() {
        seq.serialize_element(&Value(items, i))?;
    }
    seq.end()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{MapBuilder, StringBuilder};
    use arrow_array::types::Int8Type;
    use arrow_array::{
        ArrayRef, BinaryArray, DictionaryArray, StringArray, TimestampMillisecondArray,
    };

    use super::*;

    fn lines(columns: Vec<(&str, ArrayRef)>) -> Vec<serde_json::Value> {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut out = Vec::new();
        write_rows(&batch, SetKind::Feed, &mut out).unwrap();
        out.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn a_row_reads_as_the_record_it_makes() {
        let mut metadata = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for pairs in [&[("a", "1"), ("b", "2")][..], &[("a", "1"), ("a", "2")]] {
            for (name, value) in pairs {
                metadata.keys().append_value(name);
                metadata.values().append_value(value);
            }
            metadata.append(true).unwrap();
        }
        let got = lines(vec![
            (
                "url",
                Arc::new(StringArray::from(vec![
                    "http://a.example.com/",
                    "http://b.example.com/",
                ])),
            ),
            (
                "content",
                Arc::new(BinaryArray::from(vec![Some(&b"\x00\xff"[..]), None])),
            ),
            (
                "mimetype",
                Arc::new(DictionaryArray::<Int8Type>::from_iter([
                    Some("text/plain"),
                    None,
                ])),
            ),
            (
                "last_modified",
                Arc::new(TimestampMillisecondArray::from(vec![1_700_000_000_999, -1])),
            ),
            ("metadata", Arc::new(metadata.finish())),
        ]);
        assert_eq!(
            got,
            [
                serde_json::json!({
                    "url": "http://a.example.com/", "content_base64": "AP8=",
                    "mimetype": "text/plain", "last_modified": 1_700_000_000,
                    "metadata": {"a": "1", "b": "2"},
                }),
                // A null is an absent field; a repeated name keeps its pairs.
                serde_json::json!({
                    "url": "http://b.example.com/", "last_modified": -1,
                    "metadata": [["a", "1"], ["a", "2"]],
                }),
            ]
        );
    }

    #[test]
    fn malformed_arrow_data_is_refused_not_read_astray() {
        let data = arrow_data::ArrayData::builder(DataType::Utf8)
            .len(1)
            .add_buffer(arrow_buffer::Buffer::from_slice_ref([0i32, 1000]))
            .add_buffer(arrow_buffer::Buffer::from_slice_ref(b"abc"));
        // SAFETY: deliberately invalid, as data from the C data interface is not validated.
        let urls = StringArray::from(unsafe { data.build_unchecked() });
        let batch = RecordBatch::try_from_iter([("url", Arc::new(urls) as ArrayRef)]).unwrap();
        let err = write_rows(&batch, SetKind::Feed, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot read the Arrow data: "), "{err}");
    }
}
