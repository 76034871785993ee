//! Arrow IPC files (`.arrow`, `.feather`, `.ipc`) as build inputs, read by the core without
//! pyarrow: the file format (Feather version 2: a footer lists the batches) and the stream
//! format (messages up to an end-of-stream marker), plain or compressed with the codecs the
//! format has (LZ4 frame, zstd). Each batch is Arrow data that `add_arrow`'s reader
//! (`arrow::Rows`) takes as it takes any other.
//!
//! The file is mapped, and a batch's buffers are the mapped bytes where they lie (compressed
//! ones are decompressed into fresh memory): a batch at a time, as the writer of the file cut
//! them, handed on in slices of about `mapped::BATCH_BYTES` (a Polars frame written whole is
//! one batch), so that what is encoded at once stays bounded, as for Parquet.
//!
//! Every message's header is read when the file is opened: a file cut short (no footer, no
//! end-of-stream marker, a message past the end of the file) or whose headers cannot be read is
//! refused before any row is, naming where it stops, as is a file whose footer does not list
//! the messages it holds, or a message whose buffers lie past its body; a batch that cannot be
//! decoded stops the reading there. Read in part, a file would make a feed of part of it.
//!
//! Memory: a batch's pages are given back once it is decoded and as its slices are encoded,
//! and a file's dictionaries may hold `DICTIONARY_BYTES` at most.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{OffsetSizeTrait, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::convert::try_fb_to_schema;
use arrow_ipc::reader::{read_footer_length, FileDecoder};
use arrow_ipc::{root_as_footer, root_as_message, Block, MessageHeader, MetadataVersion};
use arrow_schema::{ArrowError, SchemaRef};

use crate::arrow::check_columns;
use crate::error::{panic_message, Result};
use crate::mapped::{batch_rows, unreadable, Batches, Mapping, SHRANK};
use crate::writer::SetKind;

/// What the file format begins and ends with (padded to 8 bytes at the start).
const MAGIC: &[u8] = b"ARROW1";
/// What precedes a message's length since Arrow 0.15 (before, the length came alone).
const CONTINUATION: &[u8] = &[0xff; 4];

/// A message holding data: a dictionary, or a record batch of `rows` rows.
struct Message {
    block: Block,
    rows: Option<usize>,
}

/// The schema and the data messages of a file, in order, as their headers say.
struct Contents {
    schema: SchemaRef,
    version: MetadataVersion,
    messages: Vec<Message>,
    batches: usize,
}

/// An Arrow IPC file, read as record batches (an iterator), in order.
pub struct IpcFile {
    mapping: Arc<Mapping>,
    /// The mapped file, for the decoder.
    data: Buffer,
    decoder: FileDecoder,
    messages: Vec<Message>,
    /// The next message to read.
    next: usize,
    /// The record batches in the file, and those read so far with their rows.
    batches: usize,
    batch: usize,
    read: usize,
    /// The batch being handed on in slices, the row where the next one starts, and their rows.
    slicing: Option<(RecordBatch, usize, usize)>,
    /// Where the last batch read starts: its pages are read while it is encoded.
    last: usize,
    /// The bytes of the mapping given back to the kernel.
    released: usize,
    /// The bytes each dictionary (by id) holds, as their messages declare them.
    dictionaries: HashMap<i64, u64>,
}

impl IpcFile {
    /// Opens the file and reads every message's header; refuses (naming it) a column that is no
    /// field of the rows of `set` (see `ParquetFile::open`) or whose type cannot hold its field,
    /// before any row is read.
    pub fn open(path: &Path, set: SetKind) -> Result<IpcFile> {
        let mapping = Mapping::open(path)?;
        let data = Buffer::from(mapping.bytes());
        let contents = if data.is_empty() {
            Err("it is empty".into())
        } else if data.starts_with(MAGIC) {
            file_contents(&data)
        } else if data.starts_with(b"PAR1") {
            Err("it is a Parquet file: name it .parquet".into())
        } else if data.starts_with(b"FEA1") {
            Err(
                "it is a Feather version 1 file, which is not read: write it again as \
                 Feather version 2 (pyarrow.feather.write_feather)"
                    .into(),
            )
        } else {
            stream_contents(&data, 0, true, None)
                .map_err(|stop| stop.why("the Arrow stream ends without its end-of-stream marker"))
        };
        if mapping.shrank() {
            return Err(unreadable(SHRANK.into()));
        }
        let contents = contents.map_err(unreadable)?;
        check_columns(set, contents.schema.clone())?;
        Ok(IpcFile {
            decoder: FileDecoder::new(contents.schema, contents.version),
            mapping,
            data,
            messages: contents.messages,
            next: 0,
            batches: contents.batches,
            batch: 0,
            read: 0,
            slicing: None,
            last: 0,
            released: 0,
            dictionaries: HashMap::new(),
        })
    }

    /// The next record batch, after the dictionaries before it.
    fn read(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some((batch, from, rows)) = self.slicing.take() {
                // The slices before the last one handed on are encoded: their pages go.
                let done = from.saturating_sub(rows);
                release_rows(&self.mapping, &batch, done.saturating_sub(rows), done);
                let slice = batch.slice(from, rows.min(batch.num_rows() - from));
                if from + rows < batch.num_rows() {
                    self.slicing = Some((batch, from + rows, rows));
                }
                return Some(Ok(slice));
            }
            let message = self.messages.get(self.next)?;
            self.next += 1;
            let block = message.block;
            let (start, len) = (block.offset() as usize, block_len(&block));
            let buf = self.data.slice_with_length(start, len);
            let body = body(&self.data, &block);
            let Some(rows) = message.rows else {
                let read = body.and_then(|body| {
                    self.hold(&body)?;
                    decode(|| self.decoder.read_dictionary(&block, &buf))
                });
                if let Err(why) = read {
                    let at = self.at(None);
                    return Some(Err(unreadable(format!(
                        "the dictionary before {at}: {why}"
                    ))));
                }
                continue;
            };
            // The batch before the last is encoded: its pages go (see `Mapping::release`).
            self.mapping.release(self.released, self.last);
            self.released = self.released.max(self.last);
            self.last = start;
            let read = body.and_then(|body| {
                decode(|| self.decoder.read_record_batch(&block, &buf)).map(|read| (body, read))
            });
            let why = match read {
                _ if self.mapping.shrank() => SHRANK.into(),
                Err(why) => why,
                Ok((_, None)) => "it is no record batch".into(),
                Ok((body, Some(batch))) => {
                    // Decoding read the whole batch (its values are checked): its pages go, and
                    // the slices' values come back from the page cache as they are encoded,
                    // rather than all of them staying in memory until the batch is.
                    self.mapping.release(start, start + len);
                    self.batch += 1;
                    self.read += rows;
                    let slice = batch_rows(rows, body.bytes);
                    self.slicing = Some((batch, 0, slice));
                    continue;
                }
            };
            return Some(Err(unreadable(format!("{}: {why}", self.at(Some(rows))))));
        }
    }

    /// Counts the bytes of a dictionary message into those the file's dictionaries hold,
    /// refusing past `DICTIONARY_BYTES`.
    fn hold(&mut self, body: &Body) -> std::result::Result<(), String> {
        let Some((id, delta)) = body.dictionary else {
            return Ok(());
        };
        let held = self.dictionaries.entry(id).or_default();
        *held = if delta {
            *held + body.bytes as u64
        } else {
            body.bytes as u64
        };
        let total: u64 = self.dictionaries.values().sum();
        if total > DICTIONARY_BYTES {
            return Err(format!(
                "its dictionaries grow to {total} bytes, over the {DICTIONARY_BYTES} held while \
                 it is read (each delta adds to its dictionary, which is kept whole): write \
                 the file without dictionary deltas, or its dictionary columns as plain strings"
            ));
        }
        Ok(())
    }

    /// The record batch being read, of `rows` rows if known: "record batch 3 of 10 (rows 3000
    /// to 3999)".
    fn at(&self, rows: Option<usize>) -> String {
        let (batch, batches, first) = (self.batch, self.batches, self.read);
        match rows {
            Some(rows) => {
                let end = (first + rows).saturating_sub(1);
                format!("record batch {batch} of {batches} (rows {first} to {end})")
            }
            None => format!("record batch {batch} of {batches} (from row {first})"),
        }
    }
}

impl Iterator for IpcFile {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        let next = self.read();
        if matches!(next, Some(Err(_))) {
            // Nothing is read after an error: the rows after it would make a feed with a hole.
            self.next = self.messages.len();
        }
        next
    }
}

impl Batches for IpcFile {
    fn mapping(&self) -> &Mapping {
        &self.mapping
    }
}

/// Why a stream's messages stop before their end.
enum Stop {
    /// The file ends where it should go on: after so many batches, or in one.
    Cut(String),
    /// A header cannot be read, or says what a table file cannot hold.
    Bad(String),
}

impl Stop {
    /// The message: for a file cut short, `ends` and where.
    fn why(self, ends: &str) -> String {
        match self {
            Stop::Cut(place) => format!("{ends}, {place} (cut short while it was written?)"),
            Stop::Bad(why) => why,
        }
    }
}

/// The file format: the footer lists the dictionaries and the record batches. Without it (cut
/// short), the messages before it (a stream) say where the file stops.
fn file_contents(data: &[u8]) -> std::result::Result<Contents, String> {
    const ENDS: &str = "the Arrow file ends without its footer";
    let len = data.len();
    let trailer: Option<[u8; 10]> = len
        .checked_sub(10)
        .filter(|&at| at >= 8)
        .and_then(|at| data[at..].try_into().ok());
    let Some(footer_len) = trailer.and_then(|t| read_footer_length(t).ok()) else {
        return Err(match stream_contents(data, 8, true, None) {
            Err(stop) => stop.why(ENDS),
            Ok(_) => format!("{ENDS} (cut short while it was written?)"),
        });
    };
    let end = len - 10;
    let footer = end
        .checked_sub(footer_len)
        .filter(|&start| start >= 8)
        .ok_or_else(|| format!("its footer's length ({footer_len} bytes) is past its start"))
        .and_then(|start| {
            root_as_footer(&data[start..end]).map_err(|e| format!("its footer cannot be read: {e}"))
        })?;
    let end = end - footer_len;
    let fb_schema = footer.schema().ok_or("its footer holds no schema")?;
    if !fb_schema.endianness().equals_to_target_endianness() {
        return Err("it is big-endian, which is not read: write it again little-endian".into());
    }
    let schema = try_fb_to_schema(fb_schema).map_err(arrow_why)?;
    let mut messages = Vec::new();
    for (i, block) in footer.dictionaries().iter().flatten().enumerate() {
        header(data, block, end)
            .and_then(|m| kind(&m, MessageHeader::DictionaryBatch))
            .map_err(|why| format!("dictionary {i}: {why}"))?;
        messages.push(Message {
            block: *block,
            rows: None,
        });
    }
    let blocks = footer
        .recordBatches()
        .ok_or("its footer lists no record batches")?;
    let mut rows = 0;
    for (i, block) in blocks.iter().enumerate() {
        let counted = header(data, block, end)
            .and_then(|m| counted_rows(&m))
            .map_err(|why| {
                let batches = blocks.len();
                format!("record batch {i} of {batches} (from row {rows}): {why}")
            })?;
        rows += counted;
        messages.push(Message {
            block: *block,
            rows: Some(counted),
        });
    }
    let schema = Arc::new(schema);
    // The messages before the footer must be those it lists: a footer listing fewer (damaged,
    // or written over by another one) would make a feed of part of the file. They are walked
    // from the schema's message after the magic where it is one (pyarrow, arrow-rs); Polars
    // writes a bare schema there, which readers skip, and the walk then starts at the first
    // message the footer lists (a batch left out before it would go unseen: none is written
    // there but the schema).
    let (start, known) = match data.get(8..12) {
        Some(CONTINUATION) => (8, None),
        _ => {
            let first = messages.iter().map(|m| m.block.offset()).min();
            let first = first.and_then(|at| usize::try_from(at).ok()).unwrap_or(end);
            (first, Some((Arc::clone(&schema), footer.version())))
        }
    };
    let held = stream_contents(&data[..end], start, false, known)
        .map_err(|stop| stop.why("its messages end before its footer"))?;
    let places = |messages: &[Message], batches: bool| {
        let mut at: Vec<i64> = (messages.iter())
            .filter(|m| m.rows.is_some() == batches)
            .map(|m| m.block.offset())
            .collect();
        if !batches {
            at.sort_unstable(); // The footer lists them apart, the stream before the batches.
        }
        at
    };
    if [true, false].map(|b| places(&messages, b))
        != [true, false].map(|b| places(&held.messages, b))
    {
        let dictionaries = |m: &[Message]| m.iter().filter(|m| m.rows.is_none()).count();
        return Err(format!(
            "its footer lists {} record batches and {} dictionaries, but it holds {} and {} \
             (or not where the footer says): it looks damaged; write it again",
            blocks.len(),
            dictionaries(&messages),
            held.batches,
            dictionaries(&held.messages),
        ));
    }
    Ok(Contents {
        schema,
        version: footer.version(),
        messages,
        batches: blocks.len(),
    })
}

/// The stream format (also what the file format holds before its footer), from byte `at`: the
/// schema (unless `known`), then dictionaries and record batches, up to the end-of-stream
/// marker, which must end `data` (or, unless `marked`, may be left out).
fn stream_contents(
    data: &[u8],
    mut at: usize,
    marked: bool,
    known: Option<(SchemaRef, MetadataVersion)>,
) -> std::result::Result<Contents, Stop> {
    let mut schema = known;
    let mut messages = Vec::new();
    let (mut batches, mut rows) = (0, 0);
    let after =
        |batches: usize, rows: usize| format!("after {batches} record batches ({rows} rows)");
    loop {
        let word = |at: usize| {
            data.get(at..at + 4)
                .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        };
        let (prefix, len) = match data.get(at..at + 4) {
            Some(CONTINUATION) => (8, word(at + 4)),
            _ => (4, word(at)),
        };
        let Some(len) = len else {
            if !marked && at == data.len() {
                break;
            }
            return Err(Stop::Cut(after(batches, rows)));
        };
        if len == 0 {
            let end = at + prefix;
            if end != data.len() {
                return Err(Stop::Bad(format!(
                    "{} more bytes follow the end of its Arrow stream, {}: a second stream \
                     after the first is not read",
                    data.len() - end,
                    after(batches, rows),
                )));
            }
            break;
        }
        let place = || after(batches, rows);
        let meta = i32::try_from(prefix + len as usize)
            .map_err(|_| Stop::Bad(format!("a message header of {len} bytes, {}", place())))?;
        let fb = data
            .get(at + prefix..at + meta as usize)
            .ok_or_else(|| Stop::Cut(format!("in a message {}", place())))?;
        let message = root_as_message(fb).map_err(|e| {
            Stop::Bad(format!(
                "the message {}: its header cannot be read: {e}",
                place()
            ))
        })?;
        let block = Block::new(at as i64, meta, message.bodyLength());
        if block_end(&block).is_none_or(|end| end > data.len()) {
            return Err(Stop::Cut(match counted_rows(&message) {
                Ok(n) => format!(
                    "in record batch {batches} (rows {rows} to {})",
                    rows + n.max(1) - 1
                ),
                Err(_) => format!("in a message {}", place()),
            }));
        }
        match message.header_type() {
            MessageHeader::Schema if schema.is_none() => {
                let fb_schema = message
                    .header_as_schema()
                    .ok_or_else(|| Stop::Bad("its schema cannot be read".into()))?;
                if !fb_schema.endianness().equals_to_target_endianness() {
                    return Err(Stop::Bad(
                        "it is big-endian, which is not read: write it again little-endian".into(),
                    ));
                }
                let read = try_fb_to_schema(fb_schema).map_err(|e| Stop::Bad(arrow_why(e)))?;
                schema = Some((Arc::new(read), message.version()));
            }
            _ if schema.is_none() => {
                return Err(Stop::Bad(
                    "it does not begin with its schema: is it an Arrow file?".into(),
                ));
            }
            MessageHeader::DictionaryBatch => messages.push(Message { block, rows: None }),
            _ => {
                let n = counted_rows(&message).map_err(|why| {
                    Stop::Bad(format!("record batch {batches} (from row {rows}): {why}"))
                })?;
                messages.push(Message {
                    block,
                    rows: Some(n),
                });
                batches += 1;
                rows += n;
            }
        }
        at += block_len(&block);
    }
    let (schema, version) = schema.ok_or_else(|| Stop::Bad("it holds no schema".into()))?;
    Ok(Contents {
        schema,
        version,
        messages,
        batches,
    })
}

/// The header of the message at `block`, which must lie before `end` (and in the file).
fn header<'a>(
    data: &'a [u8],
    block: &Block,
    end: usize,
) -> std::result::Result<arrow_ipc::Message<'a>, String> {
    let place = block_end(block)
        .filter(|&e| e <= end.min(data.len()) && block.metaDataLength() >= 8)
        .map(|_| block.offset() as usize);
    let Some(start) = place else {
        return Err("it lies outside the file (its place in the footer is wrong)".into());
    };
    let meta = &data[start..start + block.metaDataLength() as usize];
    let fb = if meta.starts_with(CONTINUATION) {
        &meta[8..]
    } else {
        &meta[4..]
    };
    root_as_message(fb).map_err(|e| format!("its header cannot be read: {e}"))
}

/// Refuses a message that is not of `kind`.
fn kind(message: &arrow_ipc::Message<'_>, kind: MessageHeader) -> std::result::Result<(), String> {
    match message.header_type() {
        t if t == kind => Ok(()),
        t => Err(format!("it is a {t:?} message")),
    }
}

/// How many times its compressed size a message may declare its buffers decompress to, when
/// that is more than `INFLATED_BYTES`: LZ4 cannot reach it, zstd only on runs of one byte.
const MAX_INFLATION: u64 = 1024;
const INFLATED_BYTES: u64 = 64 << 20;

/// The most bytes a file's dictionaries may hold at once, all of them. arrow-ipc keeps each
/// dictionary whole and copies it whole to add a delta to it (the old and the new copy held at
/// once), so a stream of deltas would hold and copy more the longer it is: 16 MB keeps a
/// build within its 128 MB (building a stream of 1 MB deltas peaks at 135 MB with 32 MB).
const DICTIONARY_BYTES: u64 = 16 << 20;

/// What a data message's header says of its body, checked before it is decoded.
struct Body {
    /// The bytes of its buffers, decompressed.
    bytes: usize,
    /// A dictionary's id, and whether it adds to the dictionary (a delta) or replaces it.
    dictionary: Option<(i64, bool)>,
}

/// Refuses a data message whose buffers lie past its body (a damaged header: the decoder
/// would slice past its end, and panic), or, compressed, whose buffers declare decompressed
/// sizes no sane writer declares (a compression bomb, a damaged length), before memory of
/// those sizes is asked for: the decoder allocates what they declare, and an allocation that
/// fails ends the process.
fn body(data: &[u8], block: &Block) -> std::result::Result<Body, String> {
    let message = header(data, block, usize::MAX)?;
    let (batch, dictionary) = match message.header_as_dictionary_batch() {
        Some(d) => (d.data(), Some((d.id(), d.isDelta()))),
        None => (message.header_as_record_batch(), None),
    };
    let batch = batch.ok_or("its header holds no record batch")?;
    let body_len = block.bodyLength() as u64;
    let buffers = batch.buffers().into_iter().flatten();
    for (i, b) in buffers.clone().enumerate() {
        let end = u64::try_from(b.offset())
            .ok()
            .zip(u64::try_from(b.length()).ok())
            .and_then(|(offset, length)| offset.checked_add(length));
        if end.is_none_or(|end| end > body_len) {
            let (offset, length) = (b.offset(), b.length());
            return Err(format!(
                "its buffer {i} ({length} bytes at {offset}) lies past the end of the \
                 message's {body_len} bytes: its header is damaged"
            ));
        }
    }
    if batch.compression().is_none() {
        let bytes = body_len as usize;
        return Ok(Body { bytes, dictionary });
    }
    // Each compressed buffer begins with its decompressed length (-1: stored as it is).
    let body = block.offset() as usize + block.metaDataLength() as usize;
    let declared: u64 = buffers
        .filter(|b| b.length() >= 8)
        .map(|b| {
            let at = body + b.offset() as usize;
            let prefix = data.get(at..at + 8).and_then(|p| p.try_into().ok());
            match prefix.map(i64::from_le_bytes) {
                Some(n) if n >= 0 => n as u64,
                _ => b.length() as u64 - 8,
            }
        })
        .fold(0, u64::saturating_add);
    if declared > INFLATED_BYTES && declared / MAX_INFLATION > body_len {
        return Err(format!(
            "its buffers say they decompress to {declared} bytes, over {MAX_INFLATION} times \
             their {body_len} (a compression bomb, or damaged): write it again uncompressed"
        ));
    }
    let bytes = usize::try_from(declared).unwrap_or(usize::MAX);
    Ok(Body { bytes, dictionary })
}

/// Runs a call of the decoder, whose panic becomes an error. `body` refuses the damage known
/// to make arrow-ipc panic rather than return an error, but a panic left in it must still stop
/// the reading naming the batch: through PyO3 it would be a `PanicException`, a
/// `BaseException` that no `except Exception` catches, and end `fastfeed build` with a
/// traceback. Nothing is read after an error, so a decoder left half-updated is not used again
/// (hence `AssertUnwindSafe`).
fn decode<T>(
    call: impl FnOnce() -> std::result::Result<T, ArrowError>,
) -> std::result::Result<T, String> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(read) => read.map_err(arrow_why),
        Err(panic) => {
            let why = panic_message(&*panic).unwrap_or("the decoder failed");
            Err(format!("it cannot be decoded ({why})"))
        }
    }
}

/// Lets the kernel take back the pages of the values of rows `from` to `to` of `batch`'s
/// string and binary columns, which are encoded, where they are the mapped file's (not
/// decompressed): the bulk of a batch. (The other buffers are small beside them, and string
/// views may point anywhere in their buffers.)
fn release_rows(mapping: &Mapping, batch: &RecordBatch, from: usize, to: usize) {
    if from >= to {
        return;
    }
    for column in batch.columns() {
        let values = if let Some(a) = column.as_string_opt::<i32>() {
            value_range(a.values(), a.value_offsets(), from, to)
        } else if let Some(a) = column.as_string_opt::<i64>() {
            value_range(a.values(), a.value_offsets(), from, to)
        } else if let Some(a) = column.as_binary_opt::<i32>() {
            value_range(a.values(), a.value_offsets(), from, to)
        } else if let Some(a) = column.as_binary_opt::<i64>() {
            value_range(a.values(), a.value_offsets(), from, to)
        } else {
            None
        };
        if let Some((at, len)) = values {
            mapping.release_at(at, len);
        }
    }
}

/// Where the values of rows `from` to `to` lie: their address and length.
fn value_range<O: OffsetSizeTrait>(
    values: &Buffer,
    offsets: &[O],
    from: usize,
    to: usize,
) -> Option<(*const u8, usize)> {
    let start = offsets.get(from)?.as_usize();
    let end = offsets.get(to)?.as_usize();
    let bytes = values.get(start..end)?;
    Some((bytes.as_ptr(), bytes.len()))
}

/// The rows of a record batch message, as its header counts them.
fn counted_rows(message: &arrow_ipc::Message<'_>) -> std::result::Result<usize, String> {
    kind(message, MessageHeader::RecordBatch)?;
    let length = message.header_as_record_batch().map_or(-1, |b| b.length());
    usize::try_from(length).map_err(|_| format!("its header counts {length} rows"))
}

fn block_len(block: &Block) -> usize {
    block.metaDataLength() as usize + block.bodyLength() as usize
}

/// Where the message at `block` ends; None if its place cannot be one.
fn block_end(block: &Block) -> Option<usize> {
    let offset = usize::try_from(block.offset()).ok()?;
    let meta = usize::try_from(block.metaDataLength()).ok()?;
    let body = usize::try_from(block.bodyLength()).ok()?;
    offset.checked_add(meta)?.checked_add(body)
}

/// An Arrow error as the reader said it, without Arrow's prefix ("Ipc error: ").
fn arrow_why(e: ArrowError) -> String {
    match e {
        ArrowError::IpcError(why)
        | ArrowError::ParseError(why)
        | ArrowError::InvalidArgumentError(why)
        | ArrowError::SchemaError(why) => why,
        e => e.to_string(),
    }
}
