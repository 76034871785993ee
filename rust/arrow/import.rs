//! Record batches imported through the Arrow C data interface: a stream's (`Stream`), or an
//! array of structs (`import`, `batch`).
//!
//! The import trusts the producer: arrays come unvalidated, and arrow-rs's own stream reader
//! slices a batch's columns to the rows it says it holds, a panic where they hold fewer. A faulty
//! producer is a bad input, so each batch is checked as cheaply as arrow-rs checks an array
//! (`ArrayData::validate`: lengths, buffer sizes, first and last offsets; not the values, which
//! are checked where each row is read, see `columns`) and refused, naming it and its rows,
//! before any of its rows is read.

use std::ffi::CStr;
use std::sync::Arc;

use arrow_array::ffi::{from_ffi_and_data_type, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchOptions, StructArray};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType, Schema, SchemaRef};

use super::type_name;

/// The record batches of a C stream, each checked (`import`).
pub struct Stream {
    stream: FFI_ArrowArrayStream,
    schema: SchemaRef,
    /// The batches and rows read so far, which name the next batch.
    batches: usize,
    rows: usize,
}

impl Stream {
    /// Takes `stream` and reads its schema.
    pub fn new(mut stream: FFI_ArrowArrayStream) -> Result<Stream, ArrowError> {
        let get_schema = stream
            .get_schema()
            .ok_or_else(|| failed("the stream is released, or has no get_schema"))?;
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: the callback of this stream, called on it, as the C stream interface says.
        let code = unsafe { get_schema(&raw mut stream, &raw mut schema) };
        if code != 0 {
            return Err(producer_error(&mut stream, "its schema", code));
        }
        let schema = Arc::new(Schema::try_from(&schema)?);
        Ok(Stream {
            stream,
            schema,
            batches: 0,
            rows: 0,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

impl Iterator for Stream {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Some(get_next) = self.stream.get_next() else {
            return Some(Err(failed("the stream has no get_next")));
        };
        let mut array = FFI_ArrowArray::empty();
        // SAFETY: as for `get_schema`.
        let code = unsafe { get_next(&raw mut self.stream, &raw mut array) };
        if code != 0 {
            return Some(Err(producer_error(
                &mut self.stream,
                "its next batch",
                code,
            )));
        }
        if array.is_released() {
            return None;
        }
        // SAFETY: the array the producer gave for a batch of the stream's schema.
        let read = unsafe { import(array, &self.schema, self.batches, self.rows) }
            .and_then(|data| batch(data, Arc::clone(&self.schema)));
        self.batches += 1;
        self.rows += read.as_ref().map_or(0, RecordBatch::num_rows);
        Some(read)
    }
}

/// The array of structs `array` of the columns of `schema`, as imported once checked to hold
/// what it says (`shaped`, `check`); `number` and `first` (its first row across the input)
/// name it when it does not.
///
/// # Safety
/// `array` is an ArrowArray, as the C data interface says, of `schema`'s columns as a struct.
pub unsafe fn import(
    array: FFI_ArrowArray,
    schema: &Schema,
    number: usize,
    first: usize,
) -> Result<ArrayData, ArrowError> {
    let rows = array.len();
    let data_type = DataType::Struct(schema.fields().clone());
    let imported = shaped(&array, &data_type).and_then(|()| {
        // SAFETY: as the caller says; what it holds is checked next, before it is read.
        let data =
            unsafe { from_ffi_and_data_type(array, data_type) }.map_err(|e| e.to_string())?;
        check(&data, schema).map(|()| data)
    });
    imported.map_err(|why| {
        let which = match rows {
            0 => "no rows".to_owned(),
            _ => format!("rows {first} to {}", first.saturating_add(rows - 1)),
        };
        failed(&format!(
            "Arrow batch {number} ({which}) is malformed: {why} (a fault of what exported it)"
        ))
    })
}

/// The record batch of `data`, an array of structs that has passed `import`, of `schema`.
pub fn batch(data: ArrayData, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
    let rows = data.len();
    let (_, columns, _) = StructArray::from(data).into_parts();
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(schema, columns, &options)
}

/// Refuses `array` unless it has the children that `data_type` says, and so have they: the
/// import asserts it (a panic).
fn shaped(array: &FFI_ArrowArray, data_type: &DataType) -> Result<(), String> {
    let children: Vec<&DataType> = match data_type {
        DataType::List(item)
        | DataType::LargeList(item)
        | DataType::ListView(item)
        | DataType::LargeListView(item)
        | DataType::FixedSizeList(item, _)
        | DataType::Map(item, _) => vec![item.data_type()],
        DataType::Struct(fields) => fields.iter().map(|f| f.data_type()).collect(),
        DataType::Union(fields, _) => fields.iter().map(|(_, f)| f.data_type()).collect(),
        DataType::RunEndEncoded(ends, values) => vec![ends.data_type(), values.data_type()],
        // A dictionary missing is refused by the import.
        DataType::Dictionary(_, values) => {
            return array.dictionary().map_or(Ok(()), |d| shaped(d, values))
        }
        _ => return Ok(()),
    };
    if array.num_children() != children.len() {
        return Err(format!(
            "an array of type {} has {} children, not {}",
            type_name(data_type),
            array.num_children(),
            children.len()
        ));
    }
    (children.iter().enumerate()).try_for_each(|(i, child)| shaped(array.child(i), child))
}

/// Refuses `data` unless each column (and within it each array) holds the rows it says and the
/// buffers they need: what slicing and reading it trust.
fn check(data: &ArrayData, schema: &Schema) -> Result<(), String> {
    let end = data
        .offset()
        .checked_add(data.len())
        .ok_or("its length overflows")?;
    for (field, column) in schema.fields().iter().zip(data.child_data()) {
        let name = field.name();
        if column.len() < end {
            return Err(format!(
                "its column '{name}' holds {} rows where the batch says {end}",
                column.len()
            ));
        }
        column.validate().map_err(|e| match e {
            ArrowError::InvalidArgumentError(why) => format!("its column '{name}': {why}"),
            e => format!("its column '{name}': {e}"),
        })?;
    }
    Ok(())
}

fn failed(why: &str) -> ArrowError {
    ArrowError::CDataInterface(why.to_owned())
}

/// The error of a call on `stream` that returned `code`, with the producer's message if it has
/// one.
fn producer_error(stream: &mut FFI_ArrowArrayStream, what: &str, code: i32) -> ArrowError {
    let mut why = format!("the stream failed to give {what} (error code {code})");
    if let Some(get_last_error) = stream.get_last_error() {
        // SAFETY: called on the stream whose last call failed, as the C stream interface allows;
        // the message is valid until the next call, and copied before it.
        let message = unsafe { get_last_error(stream) };
        if !message.is_null() {
            let message = unsafe { CStr::from_ptr(message) };
            why += &format!(": {}", message.to_string_lossy());
        }
    }
    failed(&why)
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, StringArray};
    use arrow_schema::Field;

    use super::*;

    fn urls(rows: usize) -> ArrayData {
        StringArray::from_iter_values((0..rows).map(|i| format!("http://a.example.com/{i}")))
            .into_data()
    }

    /// An array of `data_type`, of `children`, that says it holds `rows`, as a producer that
    /// does not validate could build it.
    fn lying(data_type: DataType, rows: usize, children: Vec<ArrayData>) -> ArrayData {
        let data = ArrayData::builder(data_type).len(rows).child_data(children);
        // SAFETY: deliberately invalid, as data from the C data interface is not validated.
        unsafe { data.build_unchecked() }
    }

    /// Imports a batch of `schema`, of `columns`, that says it holds `rows`, as the batch 2
    /// whose first row is 10.
    fn imported(
        schema: &Schema,
        rows: usize,
        columns: Vec<ArrayData>,
    ) -> Result<ArrayData, ArrowError> {
        let data = lying(DataType::Struct(schema.fields().clone()), rows, columns);
        // SAFETY: an ArrowArray exported by arrow-rs, of that type.
        unsafe { import(FFI_ArrowArray::new(&data), schema, 2, 10) }
    }

    #[test]
    fn a_batch_holding_less_than_it_says_is_refused_naming_it_not_a_panic() {
        let url = Field::new("url", DataType::Utf8, false);
        let schema = Schema::new(vec![url.clone()]);
        assert_eq!(
            imported(&schema, 4, vec![urls(3)]).unwrap_err().to_string(),
            "C Data interface error: Arrow batch 2 (rows 10 to 13) is malformed: its column \
             'url' holds 3 rows where the batch says 4 (a fault of what exported it)"
        );
        // Deeper, in a struct column: its field short of its rows, or missing.
        let meta = DataType::Struct(vec![Field::new("author", DataType::Utf8, true)].into());
        let schema = Schema::new(vec![url, Field::new("metadata", meta.clone(), true)]);
        let short = lying(meta.clone(), 4, vec![urls(3)]);
        let why = imported(&schema, 4, vec![urls(4), short])
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("its column 'metadata': ") && why.contains("(3 < 4)"),
            "{why}"
        );
        let missing = lying(meta.clone(), 4, vec![]);
        let why = imported(&schema, 4, vec![urls(4), missing])
            .unwrap_err()
            .to_string();
        assert!(why.contains("has 0 children, not 1"), "{why}");
        // As it says, it is read.
        let honest = lying(meta, 4, vec![urls(4)]);
        let data = imported(&schema, 4, vec![urls(4), honest]).unwrap();
        let read = batch(data, Arc::new(schema)).unwrap();
        assert_eq!((read.num_rows(), read.column(1).len()), (4, 4));
    }
}
