//! Readers of Arrow columns of one kind each: bytes and text, integers, times, list offsets.
//!
//! Every one reads its row with bounds checked: Arrow data crosses the C data interface
//! unvalidated, and a bad offset from another library must refuse a row, never read astray.

use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrowPrimitiveType};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, TimeUnit};

/// Why a row cannot be read: the Arrow data is not what its type says.
pub(super) const MALFORMED: &str = "the Arrow data is malformed (an offset or index out of bounds)";

pub(super) fn valid(nulls: &Option<NullBuffer>, row: usize) -> bool {
    nulls.as_ref().is_none_or(|n| n.is_valid(row))
}

/// Where each row's items are: the offsets of a list, or of a string or binary column.
pub(super) enum Offsets {
    Small(OffsetBuffer<i32>),
    Large(OffsetBuffer<i64>),
}

impl Offsets {
    pub(super) fn range(&self, row: usize) -> Result<Range<usize>, &'static str> {
        fn range<O: Copy + TryInto<usize>>(o: &[O], row: usize) -> Option<Range<usize>> {
            let start = (*o.get(row)?).try_into().ok()?;
            let end = (*o.get(row + 1)?).try_into().ok()?;
            (start <= end).then_some(start..end)
        }
        match self {
            Offsets::Small(o) => range(o, row),
            Offsets::Large(o) => range(o, row),
        }
        .ok_or(MALFORMED)
    }
}

impl Offsets {
    /// How many rows the offsets delimit.
    fn rows(&self) -> usize {
        match self {
            Offsets::Small(o) => o.len(),
            Offsets::Large(o) => o.len(),
        }
        .saturating_sub(1)
    }

    /// Whether the values of `rows` are UTF-8, checked at once as one span of the values that
    /// each offset cuts at a character's start (then every row within the span between two of
    /// them is UTF-8, as `range` requires). False where an offset lies outside the span (the
    /// rows' own checks say what is wrong), and for a span over `CHECKED_BYTES`.
    fn utf8(&self, data: &[u8], rows: Range<usize>) -> bool {
        fn utf8<O: Copy + TryInto<usize>>(o: &[O], data: &[u8], rows: Range<usize>) -> bool {
            let Some(offsets) = o.get(rows.start..=rows.end) else {
                return false;
            };
            let at = |o: O| o.try_into().ok();
            let (Some(start), Some(end)) = (at(offsets[0]), at(offsets[offsets.len() - 1])) else {
                return false;
            };
            let Some(span) = data.get(start..end).filter(|s| s.len() <= CHECKED_BYTES) else {
                return false;
            };
            // Not a continuation byte (10xxxxxx): a character starts there, or the span ends.
            let starts_char = |o: O| {
                at(o).and_then(|o| o.checked_sub(start)).is_some_and(|i| {
                    i == span.len() || span.get(i).is_some_and(|&b| (b as i8) >= -0x40)
                })
            };
            simdutf8::basic::from_utf8(span).is_ok() && offsets.iter().all(|&o| starts_char(o))
        }
        match self {
            Offsets::Small(o) => utf8(o, data, rows),
            Offsets::Large(o) => utf8(o, data, rows),
        }
    }
}

/// Rows whose text is checked as UTF-8 together, a block of them at a time (`Checked`): the
/// check of a row's 1 KB alone cost a fifth more than its share of a block's, and one of a
/// URL, mostly the call. Blocks of more than `CHECKED_BYTES` are checked row by row: their
/// rows gain nothing, and the first ones would have left the cache by the time they are read
/// again to be written.
const CHECKED_ROWS: usize = 64;
const CHECKED_BYTES: usize = 256 << 10;

/// What is known of each block of `CHECKED_ROWS` rows of a text column: unknown, UTF-8, or to
/// be checked row by row (not all UTF-8, or too big). Learnt by the encoding thread that first
/// reads a row of the block; two threads that meet at a block both check it, the same way.
pub(super) struct Checked(Box<[AtomicU8]>);

const UNKNOWN: u8 = 0;
const UTF8: u8 = 1;
const BY_ROW: u8 = 2;

impl Checked {
    fn new(rows: usize) -> Self {
        Checked(
            (0..rows.div_ceil(CHECKED_ROWS))
                .map(|_| AtomicU8::new(UNKNOWN))
                .collect(),
        )
    }
}

/// A column of strings or bytes: `utf8`, `binary`, their `large_` and `_view` forms, or a
/// dictionary of them.
pub(super) enum Bytes {
    Offsets(Offsets, Buffer, Option<NullBuffer>, Checked),
    Views(ScalarBuffer<u128>, Arc<[Buffer]>, Option<NullBuffer>),
    Dictionary(Box<Ints>, Box<Bytes>),
}

/// A row's value, `None` when null.
pub(super) type Value<'a, T> = Result<Option<T>, &'static str>;

impl Bytes {
    /// The column's reader, and whether it holds text (UTF-8); `None` for another type.
    pub(super) fn new(array: &dyn Array) -> Option<(Bytes, bool)> {
        let text = matches!(
            array.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        );
        let bytes = match array.data_type() {
            DataType::Utf8 => Self::offsets(array.as_string::<i32>().clone().into_parts()),
            DataType::LargeUtf8 => Self::offsets(array.as_string::<i64>().clone().into_parts()),
            DataType::Binary => Self::offsets(array.as_binary::<i32>().clone().into_parts()),
            DataType::LargeBinary => Self::offsets(array.as_binary::<i64>().clone().into_parts()),
            DataType::Utf8View => Self::views(array.as_string_view().clone().into_parts()),
            DataType::BinaryView => Self::views(array.as_binary_view().clone().into_parts()),
            DataType::Dictionary(_, _) => {
                let dictionary = array.as_any_dictionary();
                let keys = Ints::new(dictionary.keys())?;
                let (values, text) = Bytes::new(dictionary.values().as_ref())?;
                return Some((Bytes::Dictionary(Box::new(keys), Box::new(values)), text));
            }
            _ => return None,
        };
        Some((bytes, text))
    }

    fn offsets<O: Into<Offsets>>((offsets, data, nulls): (O, Buffer, Option<NullBuffer>)) -> Bytes {
        let offsets = offsets.into();
        let checked = Checked::new(offsets.rows());
        Bytes::Offsets(offsets, data, nulls, checked)
    }

    fn views(
        (views, buffers, nulls): (ScalarBuffer<u128>, Arc<[Buffer]>, Option<NullBuffer>),
    ) -> Bytes {
        Bytes::Views(views, buffers, nulls)
    }

    pub(super) fn get(&self, row: usize) -> Value<'_, &[u8]> {
        match self {
            Bytes::Offsets(offsets, data, nulls, _) => {
                if !valid(nulls, row) {
                    return Ok(None);
                }
                data.get(offsets.range(row)?).ok_or(MALFORMED).map(Some)
            }
            Bytes::Views(views, buffers, nulls) => {
                if !valid(nulls, row) {
                    return Ok(None);
                }
                let view = *views.get(row).ok_or(MALFORMED)?;
                let len = view as u32 as usize;
                let bytes = if len <= 12 {
                    // Short values lie in the view itself, after its length (little-endian).
                    let at = row * 16 + 4;
                    views.inner().get(at..at + len)
                } else {
                    let buffer = (view >> 64) as u32 as usize;
                    let start = (view >> 96) as u32 as usize;
                    buffers.get(buffer).and_then(|b| b.get(start..start + len))
                };
                bytes.ok_or(MALFORMED).map(Some)
            }
            Bytes::Dictionary(keys, values) => match keys.get(row) {
                None => Ok(None),
                Some(key) => values.get(usize::try_from(key).map_err(|_| MALFORMED)?),
            },
        }
    }

    /// A row's text; refused when not UTF-8, which no library should give as a string.
    pub(super) fn text(&self, row: usize) -> Value<'_, &str> {
        match self.get(row)? {
            None => Ok(None),
            // SAFETY: the row's bytes lie within a span checked as UTF-8, between offsets
            // found at characters' starts (`Offsets::utf8`).
            Some(b) if self.block_is_utf8(row) => {
                Ok(Some(unsafe { std::str::from_utf8_unchecked(b) }))
            }
            Some(b) => simdutf8::basic::from_utf8(b)
                .map(Some)
                .map_err(|_| "is not valid UTF-8"),
        }
    }

    /// Whether the block of rows `row` is in was checked (now, if not yet) as UTF-8 as a whole.
    fn block_is_utf8(&self, row: usize) -> bool {
        let Bytes::Offsets(offsets, data, _, Checked(blocks)) = self else {
            return false;
        };
        let Some(known) = blocks.get(row / CHECKED_ROWS) else {
            return false;
        };
        match known.load(Ordering::Relaxed) {
            UNKNOWN => {
                let start = row / CHECKED_ROWS * CHECKED_ROWS;
                let utf8 = offsets.utf8(data, start..(start + CHECKED_ROWS).min(offsets.rows()));
                known.store(if utf8 { UTF8 } else { BY_ROW }, Ordering::Relaxed);
                utf8
            }
            state => state == UTF8,
        }
    }

    /// How many bytes a row holds, for sharing work among threads (0 when unreadable).
    pub(super) fn len(&self, row: usize) -> usize {
        self.get(row).ok().flatten().map_or(0, <[u8]>::len)
    }
}

/// Offsets of either width, from `into_parts` of a string or binary array.
impl From<OffsetBuffer<i32>> for Offsets {
    fn from(o: OffsetBuffer<i32>) -> Self {
        Offsets::Small(o)
    }
}

impl From<OffsetBuffer<i64>> for Offsets {
    fn from(o: OffsetBuffer<i64>) -> Self {
        Offsets::Large(o)
    }
}

/// A row's number, as a reader of one column gives it.
type Reader<T> = Box<dyn Fn(usize) -> Option<T> + Send + Sync>;

/// Reads a primitive column's rows, mapped by `f`.
fn reader<P: ArrowPrimitiveType, T>(
    array: &dyn Array,
    f: impl Fn(P::Native) -> T + Send + Sync + 'static,
) -> Reader<T> {
    let array = array.as_primitive::<P>().clone();
    Box::new(move |row| array.is_valid(row).then(|| f(array.value(row))))
}

/// A column of integers of any width and sign.
pub(super) struct Ints(Reader<i128>);

impl Ints {
    pub(super) fn new(array: &dyn Array) -> Option<Ints> {
        Some(Ints(match array.data_type() {
            DataType::Int8 => reader::<Int8Type, _>(array, i128::from),
            DataType::Int16 => reader::<Int16Type, _>(array, i128::from),
            DataType::Int32 => reader::<Int32Type, _>(array, i128::from),
            DataType::Int64 => reader::<Int64Type, _>(array, i128::from),
            DataType::UInt8 => reader::<UInt8Type, _>(array, i128::from),
            DataType::UInt16 => reader::<UInt16Type, _>(array, i128::from),
            DataType::UInt32 => reader::<UInt32Type, _>(array, i128::from),
            DataType::UInt64 => reader::<UInt64Type, _>(array, i128::from),
            _ => return None,
        }))
    }

    pub(super) fn get(&self, row: usize) -> Option<i128> {
        (self.0)(row)
    }
}

/// A column of moments as seconds since the epoch: timestamps (their time zone, if any, only
/// says how to show them: the values are UTC), dates, or numbers of seconds.
pub(super) struct Seconds(Reader<f64>);

impl Seconds {
    pub(super) fn new(array: &dyn Array) -> Option<Seconds> {
        // Whole seconds, rounded down as the feed's dates are: by integers, since nanoseconds
        // of today do not fit a float's precision.
        fn floor(per_second: i64) -> impl Fn(i64) -> f64 {
            move |v| v.div_euclid(per_second) as f64
        }
        Some(Seconds(match array.data_type() {
            DataType::Timestamp(TimeUnit::Second, _) => {
                reader::<TimestampSecondType, _>(array, |v| v as f64)
            }
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                reader::<TimestampMillisecondType, _>(array, floor(1_000))
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                reader::<TimestampMicrosecondType, _>(array, floor(1_000_000))
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                reader::<TimestampNanosecondType, _>(array, floor(1_000_000_000))
            }
            DataType::Date32 => reader::<Date32Type, _>(array, |d| f64::from(d) * 86_400.0),
            DataType::Date64 => reader::<Date64Type, _>(array, floor(1_000)),
            DataType::Float16 => reader::<Float16Type, _>(array, f64::from),
            DataType::Float32 => reader::<Float32Type, _>(array, f64::from),
            DataType::Float64 => reader::<Float64Type, _>(array, |v| v),
            _ => {
                let ints = Ints::new(array)?;
                Box::new(move |row| (ints.0)(row).map(|v| v as f64))
            }
        }))
    }

    pub(super) fn get(&self, row: usize) -> Option<f64> {
        (self.0)(row)
    }
}
