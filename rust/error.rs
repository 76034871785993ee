//! The core's one error type. The bindings module is the only place it becomes a Python exception.

use std::fmt;
use std::path::PathBuf;

/// Everything the core can refuse or fail at.
#[derive(Debug)]
pub enum Error {
    /// A record breaks a rule of the protocol or of the record schema. `index` is the record's
    /// position in the batch that carried it, so the caller can name the input line.
    Record {
        index: usize,
        field: Option<&'static str>,
        message: String,
    },
    /// The writer's own settings are wrong (datasource name, feed type, size cap...).
    Config(String),
    /// Reading a `content_path` or writing a feed file failed.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn record(index: usize, field: Option<&'static str>, message: impl Into<String>) -> Self {
        Error::Record {
            index,
            field,
            message: message.into(),
        }
    }

    /// The same error, for a record `by` places further in a larger batch.
    pub fn shifted(self, by: usize) -> Self {
        match self {
            Error::Record {
                index,
                field,
                message,
            } => Error::Record {
                index: index + by,
                field,
                message,
            },
            other => other,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Record {
                index,
                field: Some(field),
                message,
            } => write!(f, "record {index}: field '{field}': {message}"),
            Error::Record {
                index,
                field: None,
                message,
            } => write!(f, "record {index}: {message}"),
            Error::Config(message) => f.write_str(message),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
