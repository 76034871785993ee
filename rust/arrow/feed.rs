//! A stream of record batches into a writer, in groups of rows: a batch may hold one row or
//! millions, and a group is what is encoded at once, so that the threads stay busy on small
//! batches and memory stays bounded on big ones.

use std::fmt::Display;

use arrow_array::RecordBatch;

use crate::error::{Error, Result};
use crate::writer::{BatchReport, FeedWriter};

use super::Rows;

/// A group ends at this many rows, or at this much content (encoded in memory at once).
const GROUP_ROWS: usize = 65_536;
const GROUP_BYTES: usize = 16 << 20;

/// Work to run without the caller's lock (the GIL, for Python).
pub type Unlocked<'a> = dyn FnMut() -> Result<BatchReport> + Send + 'a;

/// A row to encode: its index across the input, its batch among those held, its row there.
type Item = (usize, (usize, usize));

/// Writes every row of `batches`, numbered from 0 across them, through `writer`; `unlocked`
/// runs the encoding of each group (batches are read where this is called). Returns what the
/// writer reported, and the error that stopped it, if any: a refused row leaves every row
/// before it written and none after it, so that the caller can go on after it.
pub fn add_batches<E: Display>(
    writer: &mut FeedWriter,
    batches: impl Iterator<Item = std::result::Result<RecordBatch, E>>,
    unlocked: impl Fn(&mut Unlocked<'_>) -> Result<BatchReport>,
) -> (BatchReport, Option<Error>) {
    let mut report = BatchReport::default();
    // The batches the group's rows are in; the last may go on into the next group.
    let mut held: Vec<Rows> = Vec::new();
    let mut items: Vec<Item> = Vec::new();
    let (mut index, mut weight) = (0, 0);
    let mut write = |held: &[Rows], items: &[Item], report: &mut BatchReport| {
        let result = write_group(writer, held, items, &unlocked);
        let (done, error) = match result {
            Ok(done) => (done, None),
            Err((done, error)) => (done, Some(error)),
        };
        report.warnings.extend(done.warnings);
        report.finished.extend(done.finished);
        error.map_or(Ok(()), Err)
    };
    for batch in batches {
        let rows = batch
            .map_err(|e| Error::Config(format!("cannot read the Arrow data: {e}")))
            .and_then(|batch| Rows::new(&batch));
        match rows {
            Ok(rows) => held.push(rows),
            Err(e) => {
                let written = write(&held, &items, &mut report);
                return (report, Some(written.err().unwrap_or(e)));
            }
        }
        for row in 0..held[held.len() - 1].len() {
            weight += held[held.len() - 1].weight(row);
            items.push((index, (held.len() - 1, row)));
            index += 1;
            if items.len() >= GROUP_ROWS || weight >= GROUP_BYTES {
                if let Err(e) = write(&held, &items, &mut report) {
                    return (report, Some(e));
                }
                items.clear();
                weight = 0;
                // Only the batch being read may have rows left.
                held.drain(..held.len() - 1);
            }
        }
    }
    let error = write(&held, &items, &mut report).err();
    (report, error)
}

/// Encodes and writes a group's rows. On a refused row, writes the rows before it and returns
/// what they did with the error.
fn write_group(
    writer: &mut FeedWriter,
    held: &[Rows],
    items: &[Item],
    unlocked: &impl Fn(&mut Unlocked<'_>) -> Result<BatchReport>,
) -> std::result::Result<BatchReport, (BatchReport, Error)> {
    let mut write = |items: &[Item]| {
        unlocked(&mut || {
            writer.add_records(
                items,
                |&(batch, row)| held[batch].weight(row),
                |index, &(batch, row), encode| encode(&held[batch].record(row, index)?),
            )
        })
    };
    if items.is_empty() {
        return Ok(BatchReport::default());
    }
    let error = match write(items) {
        Ok(report) => return Ok(report),
        Err(error) => error,
    };
    let before = match error {
        Error::Record { index, .. } => items.partition_point(|&(i, _)| i < index),
        _ => 0,
    };
    if before == 0 {
        return Err((BatchReport::default(), error));
    }
    match write(&items[..before]) {
        Ok(report) => Err((report, error)),
        Err(other) => Err((BatchReport::default(), other)),
    }
}
