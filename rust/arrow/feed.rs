//! A stream of record batches into a writer, as records or as group memberships (`Batch`), in
//! groups of rows: a batch may hold one row or millions, and a group is what is encoded at
//! once, so that the threads stay busy on small batches and memory stays bounded on big ones. A
//! group is encoded while the next is read and the one before is taken: the threads never wait
//! for the caller, nor for a group's slowest record.

use std::fmt::Display;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_data::ArrayData;
use arrow_schema::DataType;
use arrow_select::concat::concat_batches;

use crate::error::{Error, Result};
use crate::writer::{BatchReport, FeedWriter, Item, RecordSource, StartedRecords};

/// A group ends at this many rows, or at this much content (encoded in memory at once). Three
/// groups are in memory at a time (one encoded, one taken, one written), in buffers that the
/// writer hands back once written; a writer's first groups fault in fresh pages, so the groups
/// are small: with 16 MB, a writer of 200,000 records of 1 KB took 13,000 more page faults, 3 to
/// 5% of its CPU.
const GROUP_ROWS: usize = 65_536;
const GROUP_BYTES: usize = 4 << 20;

/// Batches of fewer rows and bytes than this are gathered into one (copied), up to as many rows
/// and bytes: each batch costs a few microseconds to import and map, whatever its rows, which
/// made 100,000 rows in 1-row batches (a table grown by appends, a DuckDB result in small
/// vectors) 10 to 30 times slower than in one. An empty batch counts as a row: each held costs
/// a few KB (its arrays, and the exporter's objects that it keeps alive), and 200,000 empty
/// ones, counted by their few bytes alone, were held 65,000 at a time, in 309 MB.
const GATHER_ROWS: usize = 1024;
const GATHER_BYTES: usize = 256 << 10;

/// Work to run without the caller's lock (the GIL, for Python).
pub type Unlocked<'a> = dyn FnMut() -> Result<BatchReport> + Send + 'a;

/// A batch's rows, read in place as what a writer encodes (`Rows` as records, `Memberships` as
/// group memberships).
pub trait Batch: Sized + Send + Sync + 'static {
    /// Whether its rows are group memberships, else records.
    const MEMBERSHIPS: bool;
    /// Maps the columns of `batch`, refusing what cannot be read.
    fn new(batch: &RecordBatch) -> Result<Self>;
    /// About how many bytes `row` encodes to.
    fn weight(&self, row: usize) -> usize;
    /// Reads `row` (`index` names it in errors) and gives it to `encode`.
    fn with_item(
        &self,
        row: usize,
        index: usize,
        encode: &mut dyn FnMut(Item<'_, '_>) -> Result<()>,
    ) -> Result<()>;
}

/// A row to encode: its index across the input, its batch among the group's, its row there.
type At = (usize, (usize, usize));

/// Rows to encode at once, and the batches they are in.
struct Group<B> {
    batches: Vec<Arc<B>>,
    items: Vec<At>,
    /// Each item's weight, found once as the group was made (the encoding threads share the
    /// group by it).
    weights: Vec<usize>,
}

impl<B: Batch> RecordSource for Group<B> {
    const MEMBERSHIPS: bool = B::MEMBERSHIPS;

    fn count(&self) -> usize {
        self.items.len()
    }

    fn index(&self, i: usize) -> usize {
        self.items[i].0
    }

    fn weight(&self, i: usize) -> usize {
        self.weights[i]
    }

    fn with_item(
        &self,
        i: usize,
        encode: &mut dyn FnMut(Item<'_, '_>) -> Result<()>,
    ) -> Result<()> {
        let (index, (batch, row)) = self.items[i];
        self.batches[batch].with_item(row, index, encode)
    }
}

/// A group on the encoding threads.
type Started<B> = (Arc<Group<B>>, StartedRecords<Group<B>>);

/// Writes every row of `batches`, read as `B`, numbered from 0 across them, through `writer`;
/// `unlocked` runs the waiting for each group (batches are read where this is called). Returns
/// what the writer reported, and the error that stopped it, if any: a refused row leaves every
/// row before it written and none after it, so that the caller can go on after it.
pub fn add_batches<B: Batch, E: Display>(
    writer: &mut FeedWriter,
    batches: impl Iterator<Item = std::result::Result<RecordBatch, E>>,
    unlocked: impl Fn(&mut Unlocked<'_>) -> Result<BatchReport>,
) -> (BatchReport, Option<Error>) {
    let mut flow = Flow {
        writer,
        unlocked,
        started: None,
        report: BatchReport::default(),
    };
    let batches = Gather {
        batches,
        small: Vec::new(),
        rows: 0,
        bytes: 0,
        next: None,
    };
    // The batches the group's rows are in; the last may go on into the next group.
    let mut held: Vec<Arc<B>> = Vec::new();
    let (mut items, mut weights): (Vec<At>, Vec<usize>) = (Vec::new(), Vec::new());
    let (mut index, mut weight) = (0, 0);
    for batch in batches {
        let rows = batch.and_then(|batch| Ok((B::new(&batch)?, batch.num_rows())));
        let (rows, len) = match rows {
            Ok((rows, len)) => (Arc::new(rows), len),
            Err(e) => {
                let written = flow.last(Group {
                    batches: held,
                    items,
                    weights,
                });
                return (flow.report, Some(written.err().unwrap_or(e)));
            }
        };
        if len == 0 {
            // Read for its columns' checks alone: held, it would stay until the group is full.
            continue;
        }
        held.push(Arc::clone(&rows));
        for row in 0..len {
            let w = rows.weight(row);
            weight += w;
            weights.push(w);
            items.push((index, (held.len() - 1, row)));
            index += 1;
            if items.len() >= GROUP_ROWS || weight >= GROUP_BYTES {
                let group = Group {
                    batches: held.clone(),
                    items: std::mem::take(&mut items),
                    weights: std::mem::take(&mut weights),
                };
                if let Err(e) = flow.next(group) {
                    return (flow.report, Some(e));
                }
                weight = 0;
                // Only the batch being read may have rows left.
                held.drain(..held.len() - 1);
            }
        }
    }
    let error = flow
        .last(Group {
            batches: held,
            items,
            weights,
        })
        .err();
    (flow.report, error)
}

/// Batches as they come, but consecutive small ones (`GATHER_ROWS`, `GATHER_BYTES`) gathered
/// into one.
struct Gather<I, E> {
    batches: I,
    /// The small batches gathered so far, their rows and bytes.
    small: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
    /// What came after them, given once they are.
    next: Option<std::result::Result<RecordBatch, E>>,
}

impl<I, E> Iterator for Gather<I, E>
where
    I: Iterator<Item = std::result::Result<RecordBatch, E>>,
    E: Display,
{
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let read = |batch: std::result::Result<RecordBatch, E>| {
            batch.map_err(|e| Error::Config(format!("cannot read the Arrow data: {e}")))
        };
        if let Some(batch) = self.next.take() {
            return Some(read(batch));
        }
        while let Some(batch) = self.batches.next() {
            let bytes = batch.as_ref().ok().and_then(small);
            match (batch, bytes) {
                (Ok(batch), Some(bytes)) => {
                    self.rows += batch.num_rows().max(1);
                    self.bytes += bytes;
                    self.small.push(batch);
                    if self.rows >= GATHER_ROWS || self.bytes >= GATHER_BYTES {
                        return Some(self.gathered());
                    }
                }
                (batch, _) if self.small.is_empty() => return Some(read(batch)),
                (batch, _) => {
                    self.next = Some(batch);
                    return Some(self.gathered());
                }
            }
        }
        (!self.small.is_empty()).then(|| self.gathered())
    }
}

impl<I, E> Gather<I, E> {
    /// The small batches gathered, as one.
    fn gathered(&mut self) -> Result<RecordBatch> {
        (self.rows, self.bytes) = (0, 0);
        let small = std::mem::take(&mut self.small);
        match &small[..] {
            [one] => Ok(one.clone()),
            _ => concat_batches(small[0].schema_ref(), &small)
                .map_err(|e| Error::Config(format!("cannot read the Arrow data: {e}"))),
        }
    }
}

/// The bytes of `batch` if it is small enough to be gathered with others and can be copied: it
/// came unchecked through the C data interface, and copying trusts what reading checks row by
/// row (offsets that go down make it panic; offsets shifted by the bytes of the batches before
/// reach into theirs; a string view keeps naming a data buffer by its index, another batch's
/// once gathered), so it is checked in full first, which a small batch makes cheap: one that
/// fails is read on its own, which refuses the row at fault. Dictionaries, copied by their
/// keys, are not gathered.
fn small(batch: &RecordBatch) -> Option<usize> {
    if batch.num_rows() >= GATHER_ROWS {
        return None;
    }
    let columns: Vec<ArrayData> = batch.columns().iter().map(|c| c.to_data()).collect();
    let mut total = 0;
    for data in &columns {
        // The buffers' lengths, which `bytes` reads the offsets by.
        data.validate().ok()?;
        total += bytes(data)?;
    }
    if total >= GATHER_BYTES {
        return None;
    }
    for data in &columns {
        checked(data).ok()?;
    }
    Some(total)
}

/// The bytes of the rows of `data`; `None` for a dictionary.
fn bytes(data: &ArrayData) -> Option<usize> {
    if let DataType::Dictionary(..) = data.data_type() {
        return None;
    }
    let mut total = data.get_slice_memory_size().ok()?;
    for child in data.child_data() {
        total -= child.get_slice_memory_size().ok()?;
        total += bytes(&used(data, child))?;
    }
    Some(total)
}

/// `data` checked as `validate_full` checks it, but of its children only the rows its own rows
/// use: `validate_full` checks whole children, so each small slice of a big table (`to_batches`)
/// checked all of the table's lists, in time growing with the square of its rows.
fn checked(data: &ArrayData) -> std::result::Result<(), arrow_schema::ArrowError> {
    data.validate_data()?;
    (data.child_data().iter()).try_for_each(|child| checked(&used(data, child)))
}

/// What of `child` the rows of `data` use (a slice of a bigger array holds only its rows' share
/// of the buffers: a list's items, a struct's fields), or all of it where that is not known.
/// `data` has passed `validate`: its offsets are there to be read.
fn used(data: &ArrayData, child: &ArrayData) -> ArrayData {
    let (offset, len) = (data.offset(), data.len());
    let rows = match data.data_type() {
        DataType::List(_) | DataType::Map(..) => {
            let o = data.buffer::<i32>(0);
            usize::try_from(o[0]).ok().zip(usize::try_from(o[len]).ok())
        }
        DataType::LargeList(_) => {
            let o = data.buffer::<i64>(0);
            usize::try_from(o[0]).ok().zip(usize::try_from(o[len]).ok())
        }
        DataType::FixedSizeList(_, size) => {
            (usize::try_from(*size).ok()).map(|size| (offset * size, (offset + len) * size))
        }
        DataType::Struct(_) => Some((offset, offset + len)),
        _ => None,
    };
    match rows {
        Some((start, end)) if start <= end && end <= child.len() => child.slice(start, end - start),
        _ => child.clone(),
    }
}

/// The groups of an `add_batches` on their way to the writer, and what it reported of them.
struct Flow<'w, U, B> {
    writer: &'w mut FeedWriter,
    unlocked: U,
    /// The group being encoded while the next is read.
    started: Option<Started<B>>,
    report: BatchReport,
}

impl<U: Fn(&mut Unlocked<'_>) -> Result<BatchReport>, B: Batch> Flow<'_, U, B> {
    /// Starts encoding `group` and takes the group started before it. On an error, the group
    /// just started is waited for and dropped.
    fn next(&mut self, group: Group<B>) -> Result<()> {
        let group = Arc::new(group);
        let encoding = self.writer.start_records(Arc::clone(&group))?;
        let Some(before) = self.started.replace((group, encoding)) else {
            return Ok(());
        };
        let landed = self.land(before);
        if landed.is_err() {
            // Rows after a refused one are not taken: waited for without the lock, and dropped.
            let mut dropped = self.started.take();
            let _ = (self.unlocked)(&mut || {
                drop(dropped.take());
                Ok(BatchReport::default())
            });
        }
        landed
    }

    /// Starts the last group, if it has rows, and takes what is left.
    fn last(&mut self, group: Group<B>) -> Result<()> {
        if !group.items.is_empty() {
            self.next(group)?;
        }
        match self.started.take() {
            Some(started) => self.land(started),
            None => Ok(()),
        }
    }

    /// Waits for a group and takes it. On a refused row, takes the rows before it and returns
    /// the error.
    fn land(&mut self, (group, encoding): Started<B>) -> Result<()> {
        let writer = &mut *self.writer;
        let mut encoding = Some(encoding);
        let landed =
            (self.unlocked)(&mut || writer.land_records(encoding.take().expect("landed once")));
        let error = match landed {
            Ok(done) => {
                self.merge(done);
                return Ok(());
            }
            Err(error) => error,
        };
        let before = match error {
            Error::Record { index, .. } => group.items.partition_point(|&(i, _)| i < index),
            _ => 0,
        };
        if before > 0 {
            let group = Arc::new(Group {
                batches: group.batches.clone(),
                items: group.items[..before].to_vec(),
                weights: group.weights[..before].to_vec(),
            });
            let mut encoding = Some(writer.start_records(group)?);
            let done = (self.unlocked)(&mut || {
                writer.land_records(encoding.take().expect("landed once"))
            })?;
            self.merge(done);
        }
        Err(error)
    }

    fn merge(&mut self, done: BatchReport) {
        self.report.warnings.extend(done.warnings);
        self.report.finished.extend(done.finished);
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use arrow_array::{ArrayRef, StringArray};
    use arrow_schema::ArrowError;

    use super::*;
    use crate::arrow::Rows;
    use crate::error::Fenced;
    use crate::record::FeedType;
    use crate::writer::Options;

    /// A batch of the records `from` to `to`, URLs alone.
    fn urls(from: usize, to: usize) -> RecordBatch {
        let urls: Vec<String> = (from..to)
            .map(|i| format!("http://a.example.com/{i}"))
            .collect();
        let column: ArrayRef = Arc::new(StringArray::from(urls));
        RecordBatch::try_from_iter([("url", column)]).unwrap()
    }

    #[test]
    fn a_slice_is_checked_by_the_rows_it_uses_not_its_whole_children() {
        // Lists of one string each; the last string is not UTF-8.
        let strings = unsafe {
            ArrayData::builder(DataType::Utf8)
                .len(4)
                .add_buffer(arrow_buffer::Buffer::from_slice_ref([0i32, 1, 2, 3, 4]))
                .add_buffer(arrow_buffer::Buffer::from_slice_ref(b"abc\xff"))
                .build_unchecked()
        };
        let field = Arc::new(arrow_schema::Field::new("item", DataType::Utf8, true));
        let lists = ArrayData::builder(DataType::List(field))
            .len(4)
            .add_buffer(arrow_buffer::Buffer::from_slice_ref([0i32, 1, 2, 3, 4]))
            .add_child_data(strings)
            .build()
            .unwrap();
        let first = lists.slice(0, 2);
        assert!(first.validate_full().is_err());
        assert!(checked(&first).is_ok());
        assert!(checked(&lists.slice(2, 2)).is_err());
    }

    #[test]
    fn empty_batches_are_gathered_as_many_at_a_time_as_rows() {
        let batches = (0..3000).map(|_| Ok::<_, ArrowError>(urls(0, 0)));
        let gathered = Gather {
            batches,
            small: Vec::new(),
            rows: 0,
            bytes: 0,
            next: None,
        };
        let rows: Vec<usize> = gathered.map(|b| b.unwrap().num_rows()).collect();
        assert_eq!(
            rows,
            [0, 0, 0],
            "3,000 empty batches in 3 gatherings of 1,024 at most"
        );
    }

    #[test]
    fn a_panic_with_rows_on_the_encoding_threads_stops_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let writer =
            FeedWriter::new(dir.path(), "ds", FeedType::Incremental, Options::default()).unwrap();
        let mut fenced = Fenced::new(writer, FeedWriter::records);
        // A group of the first batch is on the encoding threads when reading the next panics.
        let batches = std::iter::once(Ok(urls(0, 70_000))).chain(std::iter::from_fn(
            || -> Option<std::result::Result<RecordBatch, ArrowError>> {
                panic!("the reader broke")
            },
        ));
        let unlocked = |work: &mut Unlocked<'_>| work();
        let added = catch_unwind(AssertUnwindSafe(|| {
            fenced.with(|writer| Ok::<_, Error>(add_batches::<Rows, _>(writer, batches, unlocked)))
        }));
        assert!(added.is_err(), "the panic goes on");
        assert!(fenced.read().is_err(), "the writer is dropped");
        let again = fenced.with(|writer| Ok::<_, Error>(writer.records()));
        let Err(Error::Config(why)) = again else {
            panic!("taken after the panic: {again:?}");
        };
        assert!(
            why.contains("the reader broke") && why.contains("may be lost"),
            "{why}"
        );
        let finished = fenced.finish(|writer, _| writer.finish());
        assert!(finished.is_err(), "no manifest is written");
        fenced.abort();
        assert!(fenced
            .read()
            .is_err_and(|e| e.to_string().contains("the reader broke")));
        assert!(!dir.path().join("manifest.jsonl").exists());
    }
}
