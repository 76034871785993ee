//! Parquet and Arrow IPC files read by the core (`TableFile`, an iterator of `ArrowBatch`), and
//! rows of Arrow data as JSON Lines records (`rows_json`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use arrow_array::RecordBatch;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::error::{Error, Result};
use crate::ipc::IpcFile;
use crate::mapped::{Batches, ReadAhead};
use crate::parquet::ParquetFile;
use crate::row_json::write_rows;
use crate::writer::SetKind;

use super::arrow_batches;

/// A Parquet file's record batches (a file named `.parquet`, or without an extension and
/// starting as Parquet files do: a Hive or Spark part file), or an Arrow IPC file's (any other),
/// read and decoded one ahead, without the GIL.
#[pyclass(module = "fastfeed._core", name = "TableFile")]
struct PyTableFile {
    // Locked only by the thread that iterates; the lock makes the reader shareable, as Python
    // objects are.
    inner: Mutex<ReadAhead>,
}

#[pymethods]
impl PyTableFile {
    /// `kind`: the kind of set whose rows the file holds (`feed`: records; `groups`:
    /// memberships), whose columns it is checked for.
    #[new]
    #[pyo3(signature = (path, kind="feed"))]
    fn new(py: Python<'_>, path: PathBuf, kind: &str) -> PyResult<Self> {
        let set = SetKind::parse(kind)?;
        let file = py.allow_threads(|| open(&path, set))?;
        Ok(PyTableFile {
            inner: Mutex::new(ReadAhead::new(file)),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<ArrowBatch>> {
        let next = py.allow_threads(|| self.inner.lock().unwrap_or_else(|e| e.into_inner()).next());
        Ok(next.transpose()?.map(|batch| ArrowBatch { batch }))
    }
}

fn open(path: &Path, set: SetKind) -> Result<Box<dyn Batches>> {
    let parquet = match path.extension() {
        Some(e) => e.eq_ignore_ascii_case("parquet"),
        // A file that cannot be read is refused by the reader of Arrow IPC files, naming why.
        None => {
            let mut magic = [0; 4];
            File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
                && &magic == b"PAR1"
        }
    };
    Ok(if parquet {
        Box::new(ParquetFile::open(path, set)?)
    } else {
        Box::new(IpcFile::open(path, set)?)
    })
}

/// A record batch read by the core: `FeedWriter.add_arrow` and `rows_json` take it as it is.
#[pyclass(module = "fastfeed._core", name = "ArrowBatch", frozen)]
pub(super) struct ArrowBatch {
    pub(super) batch: RecordBatch,
}

#[pymethods]
impl ArrowBatch {
    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    /// The rows from `offset` on, `length` of them (all when None), in place.
    #[pyo3(signature = (offset, length=None))]
    fn slice(&self, offset: usize, length: Option<usize>) -> PyResult<ArrowBatch> {
        let rows = self.batch.num_rows();
        if offset > rows {
            return Err(PyIndexError::new_err(format!(
                "offset {offset} is past the batch's {rows} rows"
            )));
        }
        let length = length.unwrap_or(rows).min(rows - offset);
        Ok(ArrowBatch {
            batch: self.batch.slice(offset, length),
        })
    }
}

/// Every row of Arrow data (what `add_arrow` of a writer of `kind` takes) as a JSON Lines line
/// (see `row_json`).
#[pyfunction]
#[pyo3(signature = (data, kind="feed"))]
fn rows_json<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    kind: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let set = SetKind::parse(kind)?;
    let mut out = Vec::new();
    for batch in arrow_batches(data, set)? {
        let batch = batch.map_err(|e| Error::Config(format!("cannot read the Arrow data: {e}")))?;
        py.allow_threads(|| write_rows(&batch, set, &mut out))?;
    }
    Ok(PyBytes::new(py, &out))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTableFile>()?;
    m.add_class::<ArrowBatch>()?;
    m.add_function(wrap_pyfunction!(rows_json, m)?)?;
    Ok(())
}
