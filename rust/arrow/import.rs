//! Record batches imported through the Arrow C data interface: a stream's (`Stream`), or an
//! array of structs (`import`, `batch`).
//!
//! The import trusts the producer: arrays come unvalidated, and arrow-rs's own stream reader
//! slices a batch's columns to the rows it says it holds, a panic where they hold fewer. A faulty
//! producer is a bad input, so each batch is checked as cheaply as arrow-rs checks an array
//! (`ArrayData::validate`: lengths, buffer sizes, first and last offsets; not the values, which
//! are checked where each row is read, see `columns`) and refused, naming it and its rows,
//! before any of its rows is read.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use arrow_array::ffi::{from_ffi_and_data_type, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchOptions, StructArray};
use arrow_data::{layout, ArrayData};
use arrow_schema::{ArrowError, DataType, Schema, SchemaRef};

use super::type_name;

/// The record batches of a C stream, each checked (`import`).
pub struct Stream {
    stream: FFI_ArrowArrayStream,
    schema: SchemaRef,
    /// The batches and rows read so far, which name the next batch.
    batches: usize,
    rows: usize,
    /// Set at the end of the stream or at its first error: the C stream interface allows no
    /// call after either, so the iterator is fused.
    done: bool,
}

impl Stream {
    /// Takes `stream` and reads its schema.
    pub fn new(mut stream: FFI_ArrowArrayStream) -> Result<Stream, ArrowError> {
        // A released stream (release NULL) may no longer be called, whatever its callbacks say.
        if stream.release().is_none() {
            return Err(failed("the stream is released"));
        }
        let get_schema = stream
            .get_schema()
            .ok_or_else(|| failed("the stream has no get_schema"))?;
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
            done: false,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The next batch, once: see `done`.
    fn read_next(&mut self) -> Option<Result<RecordBatch, ArrowError>> {
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

impl Iterator for Stream {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let read = self.read_next();
        self.done = !matches!(read, Some(Ok(_)));
        read
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

/// The head of an ArrowArray as the C data interface lays it out: arrow-rs keeps its `buffers`
/// and `children` pointers private, and asserts (a panic) where a producer left one null.
#[repr(C)]
struct RawArray {
    // Unread: they place the fields after them.
    _length: i64,
    _null_count: i64,
    _offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *const *const c_void,
    children: *const *const FFI_ArrowArray,
}

// The head of the same `#[repr(C)]` struct, or the cast in `raw` would read past its end.
const _: () = assert!(size_of::<RawArray>() <= size_of::<FFI_ArrowArray>());

fn raw(array: &FFI_ArrowArray) -> &RawArray {
    // SAFETY: FFI_ArrowArray is the C data interface's ArrowArray (`#[repr(C)]`), whose first
    // fields `RawArray` repeats in their order.
    unsafe { &*std::ptr::from_ref(array).cast::<RawArray>() }
}

/// Refuses `array` unless it has the buffers and children that `data_type` says, with
/// pointers to them, and so have they: the import trusts their count (reading past the
/// buffers, and past the variadic buffers of a view array), and asserts the pointers (a panic).
fn shaped(array: &FFI_ArrowArray, data_type: &DataType) -> Result<(), String> {
    let head = raw(array);
    let spec = layout(data_type);
    // The C data interface counts the validity bitmap among the buffers, and the lengths of
    // the variadic data buffers of a view array after them.
    let needed =
        spec.buffers.len() + usize::from(spec.can_contain_null_mask) + usize::from(spec.variadic);
    let buffers = usize::try_from(head.n_buffers).ok();
    match buffers {
        Some(n) if n >= needed => {}
        _ => {
            return Err(format!(
                "an array of type {} has {} buffers, not {needed}{}",
                type_name(data_type),
                head.n_buffers,
                if spec.variadic { " or more" } else { "" }
            ))
        }
    }
    if head.n_buffers > 0 && head.buffers.is_null() {
        return Err(format!(
            "an array of type {} has no buffers (a null pointer)",
            type_name(data_type)
        ));
    }
    if spec.variadic
        && array.num_buffers() > needed
        && array.buffer(array.num_buffers() - 1).is_null()
    {
        return Err(format!(
            "an array of type {} has no lengths of its data buffers (a null pointer)",
            type_name(data_type)
        ));
    }
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
    if usize::try_from(head.n_children).ok() != Some(children.len()) {
        return Err(format!(
            "an array of type {} has {} children, not {}",
            type_name(data_type),
            head.n_children,
            children.len()
        ));
    }
    if children.is_empty() {
        return Ok(());
    }
    if head.children.is_null() {
        return Err(format!(
            "an array of type {} has no children (a null pointer)",
            type_name(data_type)
        ));
    }
    (children.iter().enumerate()).try_for_each(|(i, data_type_of)| {
        // SAFETY: `children` is not null, and points to `n_children` pointers, as the C data
        // interface says.
        let pointer = unsafe { head.children.add(i).read_unaligned() };
        // SAFETY: not null, an ArrowArray as the C data interface says.
        match unsafe { pointer.as_ref() } {
            Some(child) => shaped(child, data_type_of),
            None => Err(format!(
                "an array of type {} has a null pointer for its child {i}",
                type_name(data_type)
            )),
        }
    })
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
    use arrow_array::{Array, StringArray, StringViewArray};
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

    /// `array` as its C struct, to break it as a faulty producer would.
    fn raw_mut(array: &mut FFI_ArrowArray) -> &mut RawArray {
        // SAFETY: as in `raw`; the pointers changed are not those its release frees.
        unsafe { &mut *std::ptr::from_mut(array).cast::<RawArray>() }
    }

    /// Imports a batch of one column `url` of `column`, as exported, once `tamper` changed it
    /// (the batch, as its C struct).
    fn import_tampered(column: ArrayData, tamper: impl FnOnce(&mut RawArray)) -> String {
        let url = Field::new("url", column.data_type().clone(), false);
        let schema = Schema::new(vec![url]);
        let rows = column.len();
        let data = lying(
            DataType::Struct(schema.fields().clone()),
            rows,
            vec![column],
        );
        let mut array = FFI_ArrowArray::new(&data);
        tamper(raw_mut(&mut array));
        // SAFETY: an ArrowArray exported by arrow-rs, then broken where `shaped` looks.
        let imported = unsafe { import(array, &schema, 0, 0) };
        imported.unwrap_err().to_string()
    }

    /// The column (the only child) of a batch, as its C struct.
    fn column(batch: &mut RawArray) -> &mut RawArray {
        // SAFETY: the batch has one child, exported by arrow-rs.
        let child = unsafe { batch.children.read() };
        // SAFETY: the child array, which arrow-rs allocated and owns until the batch's release.
        unsafe { &mut *child.cast_mut().cast::<RawArray>() }
    }

    #[test]
    fn a_view_array_short_of_its_buffers_is_refused_not_read_past_them() {
        let views = || StringViewArray::from_iter_values(["http://a.example.com/"]).into_data();
        for n in [0, 2] {
            let why = import_tampered(views(), |batch| column(batch).n_buffers = n);
            assert_eq!(
                why,
                format!(
                    "C Data interface error: Arrow batch 0 (rows 0 to 0) is malformed: an array \
                     of type string_view has {n} buffers, not 3 or more (a fault of what \
                     exported it)"
                )
            );
        }
        let why = import_tampered(urls(1), |batch| column(batch).n_buffers = -1);
        assert!(why.contains("has -1 buffers, not 3 (a fault"), "{why}");
        let why = import_tampered(urls(1), |batch| column(batch).buffers = std::ptr::null());
        assert!(
            why.contains("string has no buffers (a null pointer)"),
            "{why}"
        );
    }

    #[test]
    fn an_array_whose_children_are_null_pointers_is_refused_not_a_panic() {
        let why = import_tampered(urls(1), |batch| batch.children = std::ptr::null());
        assert!(why.contains("has no children (a null pointer)"), "{why}");
        // Pointers of its own: the exporter's release frees the children it keeps apart.
        let nulls: [*const FFI_ArrowArray; 1] = [std::ptr::null()];
        let why = import_tampered(urls(1), |batch| batch.children = nulls.as_ptr());
        assert!(why.contains("a null pointer for its child 0"), "{why}");
    }

    /// A reader that gives `items` in turn, then ends, counting the calls made of it.
    struct Counted {
        items: std::collections::VecDeque<Result<RecordBatch, ArrowError>>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
        schema: SchemaRef,
    }

    impl Iterator for Counted {
        type Item = Result<RecordBatch, ArrowError>;

        fn next(&mut self) -> Option<Self::Item> {
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.items.pop_front()
        }
    }

    impl arrow_array::RecordBatchReader for Counted {
        fn schema(&self) -> SchemaRef {
            Arc::clone(&self.schema)
        }
    }

    #[test]
    fn a_stream_is_not_called_again_after_its_error_or_its_end() {
        let schema = Arc::new(Schema::new(vec![Field::new("url", DataType::Utf8, false)]));
        let one = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(StringArray::from(vec!["http://a.example.com/"]))],
        )
        .unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let read = |items: Vec<Result<RecordBatch, ArrowError>>| {
            calls.store(0, std::sync::atomic::Ordering::Relaxed);
            let reader = Counted {
                items: items.into(),
                calls: Arc::clone(&calls),
                schema: Arc::clone(&schema),
            };
            let stream = Stream::new(FFI_ArrowArrayStream::new(Box::new(reader))).unwrap();
            let got: Vec<bool> = stream.take(4).map(|batch| batch.is_ok()).collect();
            (got, calls.load(std::sync::atomic::Ordering::Relaxed))
        };
        let failed = ArrowError::ComputeError("gone".to_owned());
        // After an error, the batch the producer would give next is not asked for.
        assert_eq!(
            read(vec![Ok(one.clone()), Err(failed), Ok(one)]),
            (vec![true, false], 2)
        );
        // Nor anything after the end.
        assert_eq!(read(vec![]), (vec![], 1));
    }

    #[test]
    fn a_released_stream_is_refused_not_called() {
        let schema = Arc::new(Schema::new(vec![Field::new("url", DataType::Utf8, false)]));
        let reader = arrow_array::RecordBatchIterator::new(vec![], schema);
        let mut stream = FFI_ArrowArrayStream::new(Box::new(reader));
        // SAFETY: no release is what a released stream has (its reader is leaked here, as one
        // whose producer released it has freed it).
        unsafe { stream.set_release(None) };
        let Err(why) = Stream::new(stream) else {
            panic!("a released stream was read")
        };
        assert_eq!(
            why.to_string(),
            "C Data interface error: the stream is released"
        );
    }
}
