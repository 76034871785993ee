//! Parquet files as build inputs, read by the core without pyarrow: a row group at a time, in
//! batches of about `mapped::BATCH_BYTES`, so that memory stays flat whatever the file's size.
//! Each batch is Arrow data that `add_arrow`'s reader (`arrow::Rows`) takes as it takes any
//! other.
//!
//! A file that cannot be read whole (truncated, corrupt, a row group shorter than its footer
//! says, shrunk while read) is an error naming the row group and the row where the reading
//! stopped: read in part, it would make a feed of part of it.
//!
//! The file is mapped, and its strings and bytes are read as views (`string_view`,
//! `binary_view`): a value is read where it lies, in the mapped page or the page decompressed,
//! instead of being copied into fresh memory twice, once read and once decoded. Fresh memory
//! costs a page fault per 4 KB: with those copies, faults took a third of a build's CPU time.

use std::path::Path;
use std::sync::Arc;

use ::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, FieldRef, Fields, Schema};
use bytes::Bytes;

use crate::arrow::check_columns;
use crate::error::{Error, Result};
use crate::mapped::{batch_rows, unreadable, Batches, Mapping, SHRANK};
use crate::writer::SetKind;

/// A Parquet file, read as record batches (an iterator), in order.
pub struct ParquetFile {
    mapping: Arc<Mapping>,
    /// The mapped file, for the Parquet reader.
    data: Bytes,
    metadata: ArrowReaderMetadata,
    /// The next row group to read.
    next_group: usize,
    /// The row group being read, if any.
    group: Option<Group>,
    /// The rows of the row groups before the next one.
    rows: usize,
    /// The bytes of the mapping given back to the kernel (see `release`).
    released: usize,
}

/// A row group being read.
struct Group {
    index: usize,
    reader: ParquetRecordBatchReader,
    /// Its first row in the file, its rows as the footer counts them, and those read so far.
    first: usize,
    rows: usize,
    read: usize,
}

impl ParquetFile {
    /// Opens the file and reads its footer; refuses (naming it) a column that is no field of the
    /// rows of `set` (records; a groups feed's memberships) or whose type cannot hold its field,
    /// before any row is read.
    pub fn open(path: &Path, set: SetKind) -> Result<ParquetFile> {
        let mapping = Mapping::open(path)?;
        let data = mapping.bytes();
        let metadata = ArrowReaderMetadata::load(&data, ArrowReaderOptions::new())
            .and_then(|m| {
                let schema = Schema::new_with_metadata(
                    m.schema().fields().iter().map(viewed).collect::<Fields>(),
                    m.schema().metadata().clone(),
                );
                let options = ArrowReaderOptions::new().with_schema(Arc::new(schema));
                ArrowReaderMetadata::try_new(m.metadata().clone(), options)
            })
            .map_err(|e| unreadable(e.to_string()))?;
        check_columns(set, metadata.schema().clone())?;
        Ok(ParquetFile {
            mapping,
            data,
            metadata,
            next_group: 0,
            group: None,
            rows: 0,
            released: 0,
        })
    }

    /// The next batch of the row group being read, or of the next one.
    fn read(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            let mut group = match self.group.take() {
                Some(group) => group,
                None => match self.start()? {
                    Ok(group) => group,
                    Err(e) => return Some(Err(e)),
                },
            };
            let why = match group.reader.next() {
                _ if self.mapping.shrank() => SHRANK.into(),
                Some(Ok(batch)) if group.read + batch.num_rows() <= group.rows => {
                    group.read += batch.num_rows();
                    self.group = Some(group);
                    return Some(Ok(batch));
                }
                Some(Ok(_)) => "more rows than the footer counts".to_owned(),
                // As the Parquet reader said it, without Arrow's "Parquet argument error: ".
                Some(Err(ArrowError::ParquetError(why))) => why,
                Some(Err(e)) => e.to_string(),
                None if group.read < group.rows => {
                    format!("the row group ends after {} rows", group.read)
                }
                None => {
                    self.release(group.index);
                    continue;
                }
            };
            let at = group.first + group.read;
            return Some(Err(self.stopped(
                group.index,
                group.first,
                group.rows,
                at,
                &why,
            )));
        }
    }

    /// Starts reading the next row group, if there is one.
    fn start(&mut self) -> Option<Result<Group>> {
        let index = self.next_group;
        let group = self.metadata.metadata().row_groups().get(index)?;
        self.next_group += 1;
        let rows = group.num_rows().max(0) as usize;
        let bytes = group.total_byte_size().max(1) as usize;
        // By the row group's average row (its values uncompressed, as the footer counts them).
        let batch = batch_rows(rows, bytes);
        let first = self.rows;
        self.rows += rows;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.data.clone(),
            self.metadata.clone(),
        )
        .with_row_groups(vec![index])
        .with_batch_size(batch)
        .build();
        Some(match reader {
            Ok(reader) => Ok(Group {
                index,
                reader,
                first,
                rows,
                read: 0,
            }),
            Err(e) => Err(self.stopped(index, first, rows, first, &e.to_string())),
        })
    }

    /// Why the reading stopped in row group `index` (of `rows` from row `first`) at row `at`.
    fn stopped(&self, index: usize, first: usize, rows: usize, at: usize, why: &str) -> Error {
        let groups = self.metadata.metadata().num_row_groups();
        let end = (first + rows).saturating_sub(1);
        unreadable(format!(
            "row group {index} of {groups} (rows {first} to {end}), at row {at}: {why}"
        ))
    }

    /// Lets the kernel take back the pages of the mapping up to the end of row group `index`,
    /// which is read (see `Mapping::release`).
    fn release(&mut self, index: usize) {
        let end = self
            .metadata
            .metadata()
            .row_group(index)
            .columns()
            .iter()
            .map(|c| c.byte_range().0.saturating_add(c.byte_range().1))
            .max()
            .map_or(0, |end| end.min(self.data.len() as u64) as usize);
        self.mapping.release(self.released, end);
        self.released = self.released.max(end);
    }
}

impl Iterator for ParquetFile {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        let next = self.read();
        if matches!(next, Some(Err(_))) {
            // Nothing is read after an error: the rows after it would make a feed with a hole.
            self.group = None;
            self.next_group = usize::MAX;
        }
        next
    }
}

impl Batches for ParquetFile {
    fn mapping(&self) -> &Mapping {
        &self.mapping
    }
}

/// The field with its strings and bytes read as views (see the module's words).
fn viewed(field: &FieldRef) -> FieldRef {
    let data_type = match field.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8View,
        DataType::Binary | DataType::LargeBinary => DataType::BinaryView,
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(viewed).collect()),
        DataType::List(item) => DataType::List(viewed(item)),
        DataType::LargeList(item) => DataType::LargeList(viewed(item)),
        DataType::Map(entries, sorted) => DataType::Map(viewed(entries), *sorted),
        _ => return field.clone(),
    };
    Arc::new(field.as_ref().clone().with_data_type(data_type))
}
