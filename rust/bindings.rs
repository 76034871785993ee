//! The Python face of the core (`fastfeed._core`), and the one place where core errors become
//! Python exceptions.
//!
//! Records cross as a list of dicts in one call: fields are read while holding the GIL, then the
//! GIL is released for checking, encoding and writing. Contents are borrowed, not copied.
//!
//! Records are read from dicts by the record schema of `jsonl.rs`, through the serde
//! deserializer over Python objects in `dict`.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema};
use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyList, PyMemoryView, PyTuple};

use crate::acl::{LEGACY_IGNORED_ROLE, LEGACY_INHERITANCE, LEGACY_INHERIT_FROM, LEGACY_PRINCIPALS};
use crate::arrow::{
    add_batches, batch, check_columns, import, Memberships, Rows, Stream, Unlocked,
};
use crate::encode::Compress;
use crate::error::{listing, Error, Fenced};
use crate::fingerprint;
use crate::guard::Guard;
use crate::jsonl::{self, FIELDS};
use crate::limits::FEED_MAX_BYTES;
use crate::record::{self, parse_date, AclFormat, FeedType};
use crate::url::check_url;
use crate::walk::{Refusal, Walk, WalkOptions};
use crate::writer::{
    check_datasource, BatchReport, FeedWriter, ManifestEntry, Options, SetKind, SharedChunk,
    DEFAULT_LEVEL, DEFAULT_MAX_BYTES, HARD_MAX_BYTES,
};

mod dict;
mod parquet;

create_exception!(
    fastfeed._core,
    FastfeedError,
    PyException,
    "The root of every fastfeed error: catching it catches them all."
);
create_exception!(
    fastfeed._core,
    FeedError,
    FastfeedError,
    "A feed cannot be built as asked: bad settings, or a record that breaks the protocol."
);
create_exception!(
    fastfeed._core,
    RecordError,
    FeedError,
    "A record breaks a rule; `index` is its position in the batch, `field` the field at fault, \
     `reason` why, `kind` what sort of refusal (stable names: not_json, unknown_field, missing, \
     invalid, not_allowed, unreadable, too_large), `written` how many lines of a chunk of JSON \
     Lines before it were written all the same (see `add_jsonl`)."
);
create_exception!(
    fastfeed._core,
    EmptyFullFeed,
    FastfeedError,
    "A full feed with nothing in it. Sent, it would remove every document of its datasource \
     (a full groups feed: every group) from the appliance; an empty input is far more often a \
     broken export than an empty source, so it takes the user's explicit word \
     (`allow_empty_full=True`, `--allow-empty-full`)."
);

/// A chunk of JSON Lines' error, whatever it is (a refused line, a file that could not be read
/// or written: `OSError`), with how many of its lines were written before it (`.written`: see
/// `FeedWriter::written_before_error`), for a caller to go on from there.
fn jsonl_error(py: Python<'_>, e: Error, written: usize) -> PyErr {
    let err = PyErr::from(e);
    // Setting an attribute of an exception object cannot fail.
    let _ = err.value(py).setattr("written", written);
    err
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        match err {
            Error::Record {
                index,
                field,
                ref message,
                kind,
                ref listed,
            } => Python::with_gil(|py| {
                let exc = RecordError::new_err(err.to_string());
                let value = exc.value(py);
                let set = || -> PyResult<()> {
                    value.setattr("index", index)?;
                    value.setattr("field", field)?;
                    value.setattr("reason", listing(message, listed.as_deref()))?;
                    value.setattr("kind", kind.as_str())?;
                    value.setattr("written", 0)?;
                    Ok(())
                };
                match set() {
                    Ok(()) => exc,
                    Err(e) => e,
                }
            }),
            Error::Config(message) => FeedError::new_err(message),
            Error::EmptyFull(message) => EmptyFullFeed::new_err(message),
            Error::Io {
                ref path,
                ref source,
            } => {
                // As Python's own OSError reads: the system's words, without Rust's "(os error N)".
                let code = source.raw_os_error().unwrap_or(0);
                let text = source.to_string();
                let text = text
                    .strip_suffix(&format!(" (os error {code})"))
                    .unwrap_or(&text);
                PyOSError::new_err((code, text.to_owned(), path.to_string_lossy().into_owned()))
            }
        }
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Records fingerprinted, as a sync's snapshot takes them: their snapshot rows (JSON), their
/// spans and URL keys (bytes, see `fingerprint::Fingerprints`), and how many.
type Fingerprinted<'py> = (String, Bound<'py, PyBytes>, Bound<'py, PyBytes>, usize);

fn fingerprinted<'py>(
    py: Python<'py>,
    found: &fingerprint::Fingerprints,
    source: i64,
    base: i64,
) -> Fingerprinted<'py> {
    let (rows, spans, keys) =
        py.allow_threads(|| (found.rows(), found.spans(source, base), found.keys()));
    (
        rows,
        PyBytes::new(py, &spans),
        PyBytes::new(py, &keys),
        found.len(),
    )
}

/// `Fingerprinted`, and how many lines the chunk held.
type ChunkFingerprinted<'py> = (
    String,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    usize,
    usize,
);

/// The records of a chunk of JSON Lines, fingerprinted on the core's threads without the GIL
/// (see `ChunkFingerprinted`).
#[pyfunction]
#[pyo3(signature = (chunk, *, source=0, base=0))]
fn fingerprint_jsonl<'py>(
    py: Python<'py>,
    chunk: &Bound<'py, PyAny>,
    source: i64,
    base: i64,
) -> PyResult<ChunkFingerprinted<'py>> {
    let chunk = shared_chunk(py, chunk)?;
    let pieces = 4 * rayon::current_num_threads();
    let (found, lines) =
        py.allow_threads(|| fingerprint::fingerprint_jsonl((*chunk).as_ref(), pieces))?;
    let (rows, spans, keys, records) = fingerprinted(py, &found, source, base);
    Ok((rows, spans, keys, records, lines))
}

/// Whether the last line of an input that ends without a newline is no complete JSON value,
/// read without the GIL (see `jsonl::cut_short`).
#[pyfunction]
fn cut_short(py: Python<'_>, line: &Bound<'_, PyAny>) -> PyResult<bool> {
    let line = shared_chunk(py, line)?;
    Ok(py.allow_threads(|| jsonl::cut_short((*line).as_ref())))
}

/// The fingerprints of records (dicts of the record schema, see `fingerprint.rs`), read as the
/// batch API reads them and hashed on the core's threads without the GIL; errors name the
/// record by its place in `records`.
#[pyfunction]
fn fingerprint_records<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let size = records.len().unwrap_or(0);
    // Declared before `batch`, so dropped after it: the records borrow from its objects.
    let read = dict::Batch::with_capacity(size);
    let mut batch = Vec::with_capacity(size);
    for (index, item) in records.try_iter()?.enumerate() {
        batch.push(read.record(index, item?)?);
    }
    use rayon::prelude::*;
    let found = py.allow_threads(|| {
        batch
            .par_iter()
            .enumerate()
            .map(|(index, record)| fingerprint::fingerprint(index, record))
            .collect::<Result<Vec<_>, Error>>()
    })?;
    drop(batch);
    Ok(found.iter().map(|fp| PyBytes::new(py, fp)).collect())
}

/// Whether the URL keys in the file `path` (as `fingerprint_jsonl` gave them) hold a repeat.
#[pyfunction]
fn repeated_keys(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
    py.allow_threads(|| {
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let mut keys: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()))
            .collect();
        drop(bytes);
        Ok::<_, Error>(fingerprint::repeated(&mut keys))
    })
    .map_err(PyErr::from)
}

/// The moment a `last_modified` value names, in seconds since the epoch (UTC), read as every
/// fastfeed receiver reads it; `ValueError` says why it is not a date.
#[pyfunction]
fn parse_last_modified(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    let ts = dict::timestamp(value).map_err(PyValueError::new_err)?;
    let (when, _) = parse_date(&ts).map_err(PyValueError::new_err)?;
    Ok(when.timestamp() as f64)
}

fn entry_dict<'py>(py: Python<'py>, e: &ManifestEntry) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("file", &e.file)?;
    d.set_item("datasource", &e.datasource)?;
    d.set_item("feedtype", e.feedtype.as_str())?;
    d.set_item("records", e.records)?;
    d.set_item("bytes", e.bytes)?;
    d.set_item("digest", &e.digest)?;
    d.set_item("kind", e.kind.as_str())?;
    Ok(d)
}

fn entries_list<'py>(py: Python<'py>, entries: &[ManifestEntry]) -> PyResult<Bound<'py, PyList>> {
    let items = entries
        .iter()
        .map(|e| entry_dict(py, e))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Writes records into size-capped feed files. See `fastfeed.FeedWriter` for the documented API.
#[pyclass(module = "fastfeed._core", name = "FeedWriter")]
struct PyFeedWriter {
    /// Every call that may change the writer goes through `Fenced::with`.
    inner: Fenced<FeedWriter, Counts>,
    /// What the writer takes as rows of Arrow data: records, or a groups feed's memberships.
    set: SetKind,
}

/// A writer's counts, read from it while it is open, and kept once it is closed (a user
/// prints them after closing).
#[derive(Clone, Copy)]
struct Counts {
    records: u64,
    bytes: u64,
    files: usize,
}

impl Counts {
    fn of(writer: &FeedWriter) -> Self {
        Counts {
            records: writer.records(),
            bytes: writer.bytes(),
            files: writer.entries().len(),
        }
    }
}

/// A Python buffer kept exported, so alive and in place, while the encoding threads read it.
struct Exported(PyBuffer<u8>);

impl AsRef<[u8]> for Exported {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: checked contiguous and immutable by `shared_chunk`, and exported until dropped.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr() as *const u8, self.0.len_bytes()) }
    }
}

/// A chunk's bytes for the encoding threads, which read them without the GIL. Borrowed, which
/// spares a copy, only when nothing can change them meanwhile: bytes, or a view of an object
/// whose own memory is read-only (a file mapped for reading). A read-only view of a bytearray
/// is not: it is copied.
fn shared_chunk(py: Python<'_>, chunk: &Bound<'_, PyAny>) -> PyResult<SharedChunk> {
    let buffer = PyBuffer::<u8>::get(chunk)?;
    let frozen = chunk.is_instance_of::<PyBytes>()
        || (chunk.is_instance_of::<PyMemoryView>()
            && chunk
                .getattr("obj")
                .and_then(|obj| PyBuffer::<u8>::get(&obj))
                .is_ok_and(|own| own.readonly()));
    Ok(if frozen && buffer.is_c_contiguous() {
        Arc::new(Exported(buffer))
    } else {
        Arc::new(buffer.to_vec(py)?)
    })
}

/// Arrow data read in place, as record batches.
type Batches = Box<dyn Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>>>;

/// The capsule `value` should be, by its name in the Arrow PyCapsule interface.
fn capsule<'py>(value: Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyCapsule>> {
    let capsule = value.downcast_into::<PyCapsule>()?;
    if capsule.name()?.and_then(|n| n.to_str().ok()) != Some(name) {
        return Err(PyTypeError::new_err(format!(
            "expected a capsule named {name}"
        )));
    }
    Ok(capsule)
}

/// The record batches of what exports the Arrow PyCapsule interface: a stream
/// (`__arrow_c_stream__`), else an array of structs (`__arrow_c_array__`); or of a batch the
/// core read itself (a Parquet or Arrow IPC file's). A stream's columns are checked as a
/// writer of `set` reads them.
fn arrow_batches(data: &Bound<'_, PyAny>, set: SetKind) -> PyResult<Batches> {
    if let Ok(batch) = data.downcast::<parquet::ArrowBatch>() {
        return Ok(Box::new(std::iter::once(Ok(batch.get().batch.clone()))));
    }
    let failed = |e: arrow_schema::ArrowError| {
        FeedError::new_err(format!("cannot read the Arrow data: {e}"))
    };
    if data.hasattr("__arrow_c_stream__")? {
        let stream = capsule(
            data.call_method0("__arrow_c_stream__")?,
            "arrow_array_stream",
        )?;
        // SAFETY: a capsule of that name holds an ArrowArrayStream; `from_raw` moves it out and
        // leaves it released, which the capsule's destructor then skips.
        let reader = Stream::new(unsafe {
            FFI_ArrowArrayStream::from_raw(stream.pointer() as *mut FFI_ArrowArrayStream)
        })
        .map_err(failed)?;
        // The columns are checked before any row is read, so that an empty stream is too.
        check_columns(set, reader.schema())?;
        return Ok(Box::new(reader));
    }
    if data.hasattr("__arrow_c_array__")? {
        let (schema, array): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            data.call_method0("__arrow_c_array__")?.extract()?;
        let (schema, array) = (
            capsule(schema, "arrow_schema")?,
            capsule(array, "arrow_array")?,
        );
        let not_table = |t: &DataType| {
            FeedError::new_err(format!(
                "Arrow data of type {} is not a table: give a table, a record batch or an array \
                 of structs without nulls",
                crate::arrow::type_name(t)
            ))
        };
        // SAFETY: a capsule of that name holds an ArrowSchema, only read.
        let data_type =
            DataType::try_from(unsafe { &*(schema.pointer() as *const FFI_ArrowSchema) })
                .map_err(failed)?;
        let DataType::Struct(fields) = &data_type else {
            return Err(not_table(&data_type));
        };
        let schema = Arc::new(Schema::new(fields.clone()));
        // SAFETY: a capsule of that name holds an ArrowArray, here of that type; it is moved
        // out (and left released).
        let array = unsafe {
            import(
                FFI_ArrowArray::from_raw(array.pointer() as *mut FFI_ArrowArray),
                &schema,
                0,
                0,
            )
        }
        .map_err(failed)?;
        if array.null_count() > 0 {
            return Err(not_table(&data_type));
        }
        return Ok(Box::new(std::iter::once(batch(array, schema))));
    }
    Err(PyTypeError::new_err(format!(
        "expected Arrow data (an object with __arrow_c_stream__ or __arrow_c_array__, such as a \
         pyarrow Table, RecordBatch or RecordBatchReader, or a Polars DataFrame), got {}",
        type_name(data)
    )))
}

/// A chunk's warnings, the files it finished and its number of lines.
type JsonlReport<'py> = (Vec<(usize, String)>, Bound<'py, PyList>, usize);

fn jsonl_report(py: Python<'_>, report: BatchReport) -> PyResult<JsonlReport<'_>> {
    Ok((
        report.warnings,
        entries_list(py, &report.finished)?,
        report.lines,
    ))
}

#[pymethods]
impl PyFeedWriter {
    #[new]
    #[pyo3(signature = (out_dir, datasource, feedtype, *, kind="feed", max_bytes=DEFAULT_MAX_BYTES, max_records=0, compress="auto", level=DEFAULT_LEVEL, workers=0, acl_format="per-url", allow_empty_full=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        out_dir: PathBuf,
        datasource: &str,
        feedtype: &str,
        kind: &str,
        max_bytes: u64,
        max_records: u64,
        compress: &str,
        level: u8,
        workers: usize,
        acl_format: &str,
        allow_empty_full: bool,
    ) -> PyResult<Self> {
        let feedtype = FeedType::parse(feedtype).ok_or_else(|| {
            FeedError::new_err(format!(
                "feed type '{feedtype}' is not one of full, incremental, metadata-and-url"
            ))
        })?;
        let compress = Compress::parse(compress).ok_or_else(|| {
            FeedError::new_err(format!(
                "compress '{compress}' is not one of auto, always, never"
            ))
        })?;
        let acl_format = AclFormat::parse(acl_format).ok_or_else(|| {
            FeedError::new_err(format!(
                "acl format '{acl_format}' is not per-url or legacy"
            ))
        })?;
        let opts = Options {
            max_bytes,
            max_records,
            compress,
            level,
            workers,
            acl_format,
            allow_empty_full,
        };
        let set = SetKind::parse(kind)?;
        let writer =
            py.allow_threads(|| FeedWriter::create(set, &out_dir, datasource, feedtype, opts))?;
        Ok(PyFeedWriter {
            inner: Fenced::new(writer, Counts::of),
            set,
        })
    }

    /// Checks, encodes and writes a batch of records (dicts). Returns the warnings, as
    /// (index, message) pairs, and the files finished meanwhile, as manifest entries.
    #[allow(clippy::type_complexity)]
    fn add_batch<'py>(
        &mut self,
        py: Python<'py>,
        records: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<(usize, String)>, Bound<'py, PyList>)> {
        let size = records.len().unwrap_or(0);
        // Declared before `batch`, so dropped after it: the records borrow from its objects.
        let read = dict::Batch::with_capacity(size);
        let mut batch = Vec::with_capacity(size);
        for (index, item) in records.try_iter()?.enumerate() {
            batch.push(read.record(index, item?)?);
        }
        let report = self
            .inner
            .with(|writer| py.allow_threads(|| writer.add_batch(&batch)))?;
        drop(batch);
        Ok((report.warnings, entries_list(py, &report.finished)?))
    }

    /// Checks, encodes and writes Arrow data (see `arrow_batches`), its rows numbered from 0
    /// across it. Returns as `add_batch`, plus the `RecordError` that stopped it, if any: the
    /// rows before the refused one are written then (and reported), and none after it.
    #[allow(clippy::type_complexity)]
    fn add_arrow<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<(usize, String)>, Bound<'py, PyList>, Option<PyObject>)> {
        let (set, batches) = (self.set, arrow_batches(data, self.set)?);
        let unlocked = |work: &mut Unlocked<'_>| py.allow_threads(work);
        let (report, error) = self.inner.with(|writer| {
            PyResult::Ok(match set {
                SetKind::Groups => add_batches::<Memberships, _>(writer, batches, unlocked),
                SetKind::Feed | SetKind::Thunderstone => {
                    add_batches::<Rows, _>(writer, batches, unlocked)
                }
            })
        })?;
        let error = match error {
            None => None,
            Some(e @ Error::Record { .. }) => Some(PyErr::from(e).into_value(py).into_any()),
            Some(e) => return Err(e.into()),
        };
        Ok((report.warnings, entries_list(py, &report.finished)?, error))
    }

    /// Parses, checks, encodes and writes a chunk of JSON Lines (whole lines), ahead of the
    /// chunks started and not yet waited for. Errors carry the index of the line in the chunk,
    /// blank lines counted, and all of them how many of its lines were written before them
    /// (`written`, an `OSError`'s too: none, unless the chunk named too many big files for one
    /// round). Returns as `add_batch`, plus the number of lines in the chunk.
    fn add_jsonl<'py>(
        &mut self,
        py: Python<'py>,
        chunk: &Bound<'py, PyAny>,
    ) -> PyResult<JsonlReport<'py>> {
        let chunk = shared_chunk(py, chunk)?;
        let report = self.inner.with(|writer| {
            py.allow_threads(|| writer.add_jsonl(chunk))
                .map_err(|e| jsonl_error(py, e, writer.written_before_error()))
        })?;
        jsonl_report(py, report)
    }

    /// Starts encoding a chunk of JSON Lines on the worker threads and returns at once.
    fn start_jsonl(&mut self, py: Python<'_>, chunk: &Bound<'_, PyAny>) -> PyResult<()> {
        let chunk = shared_chunk(py, chunk)?;
        self.inner.with(|writer| {
            writer.start_jsonl(chunk);
            PyResult::Ok(())
        })
    }

    /// Waits for the oldest chunk started and writes it; returns as `add_jsonl`.
    fn wait_jsonl<'py>(&mut self, py: Python<'py>) -> PyResult<JsonlReport<'py>> {
        let report = self.inner.with(|writer| {
            py.allow_threads(|| writer.wait_jsonl())
                .map_err(|e| jsonl_error(py, e, writer.written_before_error()))
        })?;
        jsonl_report(py, report)
    }

    /// Closes the last file, writes `manifest.jsonl`, and returns (all entries, entries finished
    /// by this call).
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let (all, finished) = self.inner.finish(|writer, counts| {
            let done = py.allow_threads(|| writer.finish())?;
            counts.files = done.0.len();
            Ok(done)
        })?;
        Ok((entries_list(py, &all)?, entries_list(py, &finished)?))
    }

    /// Stops without a manifest, removing the half-written file.
    fn abort(&mut self) {
        self.inner.abort();
    }

    /// From now on (`on`), or no longer, fingerprints each record taken as JSON Lines on the
    /// encoding threads, refusing deletes and updates (a snapshot's records).
    fn fingerprint_records(&mut self, on: bool) -> PyResult<()> {
        self.inner
            .with(|writer| Ok(writer.fingerprint_records(on)?))
    }

    /// From now on (`on`), or no longer, a refused line of JSON Lines is set aside and the
    /// chunk's other lines are written, in one pass: `take_refused` hands the refusals over.
    fn skip_refused(&mut self, on: bool) -> PyResult<()> {
        self.inner.with(|writer| {
            writer.skip_refused(on);
            PyResult::Ok(())
        })
    }

    /// The `RecordError`s of up to `most` of the lines set aside and not yet handed over, in
    /// input order, each indexed by its line in its chunk.
    fn take_refused(&mut self, py: Python<'_>, most: usize) -> PyResult<Vec<PyObject>> {
        let refused = self
            .inner
            .with(|writer| PyResult::Ok(writer.take_refused(most)))?;
        Ok(refused
            .into_iter()
            .map(|e| PyErr::from(e).into_value(py).into_any())
            .collect())
    }

    /// The fingerprints of the records taken since last asked, as `fingerprint_jsonl` gives
    /// them; `source` and `base` (the chunk's offset in it) place their spans.
    #[pyo3(signature = (*, source=0, base=0))]
    fn take_fingerprints<'py>(
        &mut self,
        py: Python<'py>,
        source: i64,
        base: i64,
    ) -> PyResult<Fingerprinted<'py>> {
        let found = self
            .inner
            .with(|writer| PyResult::Ok(writer.take_fingerprints()))?;
        Ok(fingerprinted(py, &found, source, base))
    }

    /// The kind of set written (`feed`, `groups`, `thunderstone`), as `kind` names it.
    #[getter]
    fn kind(&self) -> &'static str {
        self.set.as_str()
    }

    /// The writer's counts, final once it is closed or aborted; a writer whose close failed, or
    /// that stopped, raises why.
    #[getter]
    fn records(&self) -> PyResult<u64> {
        Ok(self.inner.read()?.records)
    }

    #[getter]
    fn bytes(&self) -> PyResult<u64> {
        Ok(self.inner.read()?.bytes)
    }

    #[getter]
    fn files(&self) -> PyResult<usize> {
        Ok(self.inner.read()?.files)
    }
}

/// Why the appliance would refuse this record URL, or None when it is fine.
#[pyfunction]
fn url_problem(url: &str) -> Option<String> {
    check_url(url).err()
}

/// The role suffix the appliance strips from the content of legacy ACL meta `name` (and the
/// writer refuses), or None if it strips none.
#[pyfunction]
fn legacy_role(name: &str, content: &str) -> Option<&'static str> {
    crate::acl::legacy_role(name, content)
}

/// Why this is not a MIME type, or None when it is one.
#[pyfunction]
fn mimetype_problem(mimetype: &str) -> Option<String> {
    record::check_mimetype(mimetype).err()
}

/// Why this datasource name is not allowed, or None when it is fine.
#[pyfunction]
fn datasource_problem(name: &str) -> Option<String> {
    check_datasource(name).err().map(|e| e.to_string())
}

/// Guards a mapped input file while it is read (see `guard.rs`): a read past the end of a file
/// that shrank finds zeros instead of killing the process, and `truncated` tells. The mapping
/// must outlive the guard, which `close` (or its end) unregisters.
#[pyclass(module = "fastfeed._core", name = "MappingGuard")]
struct PyMappingGuard {
    guard: Option<Guard>,
}

#[pymethods]
impl PyMappingGuard {
    #[new]
    fn new(mapping: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buffer = PyBuffer::<u8>::get(mapping)?;
        let guard = Guard::new(buffer.buf_ptr() as *const u8, buffer.len_bytes());
        Ok(Self { guard })
    }

    #[getter]
    fn truncated(&self) -> bool {
        self.guard.as_ref().is_some_and(Guard::hit)
    }

    fn close(&mut self) {
        self.guard = None;
    }
}

/// A directory's files as records, walked on a thread of the core's own (see `walk.rs`); each
/// item is a batch: its records as JSON Lines, each line's path, and the items refused, each
/// as its path, why (`directory`, `file`, `name`, `not_regular`) and the error's number.
#[pyclass(module = "fastfeed._core", name = "DirectoryWalk")]
struct PyDirectoryWalk(Walk);

type WalkBatch<'py> = (
    Bound<'py, PyBytes>,
    Vec<String>,
    Vec<(String, &'static str, i32)>,
);

#[pymethods]
impl PyDirectoryWalk {
    #[new]
    #[pyo3(signature = (top, base_url, skip, batch_items, batch_bytes))]
    fn new(
        top: PathBuf,
        base_url: String,
        skip: Option<(u64, u64)>,
        batch_items: usize,
        batch_bytes: u64,
    ) -> PyResult<Self> {
        let options = WalkOptions {
            base_url,
            skip,
            batch_items: batch_items.max(1),
            batch_bytes,
        };
        let walk = Walk::start(top.into_os_string(), options)
            .map_err(|e| FeedError::new_err(format!("cannot start the directory walk: {e}")))?;
        Ok(Self(walk))
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<WalkBatch<'py>>> {
        let walk = &mut self.0;
        let Some(batch) = py.allow_threads(|| walk.next_batch()).map_err(|_| {
            FeedError::new_err(
                "the directory walk stopped before its end (a bug in fastfeed: please report it)",
            )
        })?
        else {
            return Ok(None);
        };
        let refused = batch
            .refused
            .into_iter()
            .map(|(path, why)| match why {
                Refusal::Directory(errno) => (path, "directory", errno),
                Refusal::File(errno) => (path, "file", errno),
                Refusal::Name => (path, "name", 0),
                Refusal::NotRegular => (path, "not_regular", 0),
            })
            .collect();
        Ok(Some((PyBytes::new(py, &batch.lines), batch.paths, refused)))
    }
}

/// A BLAKE3 hash, given its bytes a piece at a time (the digest of feed files, checked at push):
/// each piece is hashed without the GIL, its chunks side by side.
#[pyclass(module = "fastfeed._core", name = "Blake3")]
struct PyBlake3(blake3::Hasher);

#[pymethods]
impl PyBlake3 {
    #[new]
    fn new() -> Self {
        Self(blake3::Hasher::new())
    }

    fn update(&mut self, py: Python<'_>, data: &[u8]) {
        let hasher = &mut self.0;
        py.allow_threads(|| {
            hasher.update(data);
        });
    }

    fn hexdigest(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// An XXH3-128 hash, given its bytes a piece at a time (the digest of feed files, checked at
/// push; see `file_digest`): each piece is hashed without the GIL.
#[pyclass(module = "fastfeed._core", name = "Xxh3")]
struct PyXxh3(xxhash_rust::xxh3::Xxh3Default);

#[pymethods]
impl PyXxh3 {
    #[new]
    fn new() -> Self {
        Self(xxhash_rust::xxh3::Xxh3Default::new())
    }

    fn update(&mut self, py: Python<'_>, data: &[u8]) {
        let hasher = &mut self.0;
        py.allow_threads(|| hasher.update(data));
    }

    /// The hash in the canonical form `xxhsum -H2` prints.
    fn hexdigest(&self) -> String {
        format!("{:032x}", self.0.digest128())
    }
}

#[pymodule]
#[pyo3(name = "_core")]
fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyFeedWriter>()?;
    m.add_class::<PyMappingGuard>()?;
    m.add_class::<PyBlake3>()?;
    m.add_class::<PyXxh3>()?;
    m.add_class::<PyDirectoryWalk>()?;
    m.add_function(wrap_pyfunction!(url_problem, m)?)?;
    m.add_function(wrap_pyfunction!(parse_last_modified, m)?)?;
    m.add_function(wrap_pyfunction!(datasource_problem, m)?)?;
    m.add_function(wrap_pyfunction!(mimetype_problem, m)?)?;
    m.add_function(wrap_pyfunction!(legacy_role, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(cut_short, m)?)?;
    m.add_function(wrap_pyfunction!(repeated_keys, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint_records, m)?)?;
    parquet::register(m)?;
    m.add("FastfeedError", py.get_type::<FastfeedError>())?;
    m.add("FeedError", py.get_type::<FeedError>())?;
    m.add("RecordError", py.get_type::<RecordError>())?;
    m.add("EmptyFullFeed", py.get_type::<EmptyFullFeed>())?;
    m.add("DEFAULT_MAX_BYTES", DEFAULT_MAX_BYTES)?;
    m.add("HARD_MAX_BYTES", HARD_MAX_BYTES)?;
    m.add("FEED_MAX_BYTES", FEED_MAX_BYTES)?;
    m.add("DEFAULT_LEVEL", DEFAULT_LEVEL)?;
    m.add("FINGERPRINT_VERSION", fingerprint::VERSION)?;
    m.add("RECORD_FIELDS", PyTuple::new(py, FIELDS)?)?;
    let principals = PyDict::new(py);
    for (name, scope, access) in LEGACY_PRINCIPALS {
        principals.set_item(name, (scope, access))?;
    }
    m.add("LEGACY_PRINCIPALS", principals)?;
    m.add("LEGACY_INHERITANCE", LEGACY_INHERITANCE)?;
    m.add("LEGACY_INHERIT_FROM", LEGACY_INHERIT_FROM)?;
    m.add("LEGACY_IGNORED_ROLE", LEGACY_IGNORED_ROLE)?;
    Ok(())
}
