//! The core's one error type. The bindings module is the only place it becomes a Python exception.

use std::fmt;
use std::path::PathBuf;

/// What is wrong with a refused record, for programs that sort refusals (`RecordError.kind`);
/// the message says it for people. The names are stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordErrorKind {
    /// The line is not one JSON object (syntax, byte order mark, not UTF-8).
    NotJson,
    /// A field the schema does not have.
    UnknownField,
    /// A field the record needs is absent.
    Missing,
    /// A field's value is of the wrong type, out of range, or not allowed as it is.
    Invalid,
    /// A field or action this feed, set or receiver cannot carry.
    NotAllowed,
    /// A `content_path` that cannot be read.
    Unreadable,
    /// The record is too large for any feed file.
    TooLarge,
}

impl RecordErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordErrorKind::NotJson => "not_json",
            RecordErrorKind::UnknownField => "unknown_field",
            RecordErrorKind::Missing => "missing",
            RecordErrorKind::Invalid => "invalid",
            RecordErrorKind::NotAllowed => "not_allowed",
            RecordErrorKind::Unreadable => "unreadable",
            RecordErrorKind::TooLarge => "too_large",
        }
    }
}

/// Everything the core can refuse or fail at.
#[derive(Debug)]
pub enum Error {
    /// A record breaks a rule of the protocol or of the record schema. `index` is the record's
    /// position in the batch that carried it, so the caller can name the input line.
    Record {
        index: usize,
        field: Option<&'static str>,
        message: String,
        kind: RecordErrorKind,
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
    /// A record whose `field` has a wrong value (the common case: `RecordErrorKind::Invalid`).
    pub fn record(index: usize, field: Option<&'static str>, message: impl Into<String>) -> Self {
        Error::refused(RecordErrorKind::Invalid, index, field, message)
    }

    /// A record refused for a reason of another `kind`.
    pub fn refused(
        kind: RecordErrorKind,
        index: usize,
        field: Option<&'static str>,
        message: impl Into<String>,
    ) -> Self {
        Error::Record {
            index,
            field,
            message: message.into(),
            kind,
        }
    }

    /// The same error, for a record `by` places further in a larger batch.
    pub fn shifted(self, by: usize) -> Self {
        match self {
            Error::Record {
                index,
                field,
                message,
                kind,
            } => Error::Record {
                index: index + by,
                field,
                message,
                kind,
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
                ..
            } => write!(f, "record {index}: field '{field}': {message}"),
            Error::Record {
                index,
                field: None,
                message,
                ..
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
