//! The core's one error type. The bindings module is the only place it becomes a Python exception.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
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
        /// The fields the message goes on to list (see `listing`), held apart: the same for
        /// every line of a file, they are held once where many refusals are kept
        /// (`writer::refused`).
        listed: Option<String>,
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
            listed: None,
        }
    }

    /// The same refusal, its message going on to list the fields `fields`.
    pub fn with_listed(mut self, fields: Option<String>) -> Self {
        if let Error::Record { listed, .. } = &mut self {
            *listed = fields;
        }
        self
    }

    /// The same error, for a record `by` places further in a larger batch.
    pub fn shifted(self, by: usize) -> Self {
        match self {
            Error::Record {
                index,
                field,
                message,
                kind,
                listed,
            } => Error::Record {
                index: index + by,
                field,
                message,
                kind,
                listed,
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
                listed,
                ..
            } => write!(
                f,
                "record {index}: field '{field}': {}",
                listing(message, listed.as_deref())
            ),
            Error::Record {
                index,
                field: None,
                message,
                listed,
                ..
            } => write!(f, "record {index}: {}", listing(message, listed.as_deref())),
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

/// A message that goes on to list fields (`listed`, as "url, action"), as it is told.
pub fn listing<'m>(message: &'m str, listed: Option<&str>) -> Cow<'m, str> {
    match listed {
        None => Cow::Borrowed(message),
        Some(fields) => Cow::Owned(format!("{message} (fields: {fields})")),
    }
}

/// What a panic says, if it says it in words.
pub fn panic_message(panic: &(dyn Any + Send)) -> Option<&str> {
    (panic.downcast_ref::<&str>().copied())
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
}

/// A writer that a call may have left half-way: a panic (a bug) can end a call with rows on the
/// encoding threads, taken by neither its files nor an error. The writer is then dropped (as an
/// abort drops it: the unfinished file is removed) and every later call is refused, naming the
/// panic, so that no caller goes on and closes a feed that lacks those rows without a word.
pub struct Fenced<T> {
    value: Option<T>,
    /// What the panic said, once a call panicked.
    panicked: Option<String>,
}

impl<T> Fenced<T> {
    pub fn new(value: T) -> Self {
        Fenced {
            value: Some(value),
            panicked: None,
        }
    }

    /// The writer, or none once it is closed; a writer that stopped is refused, naming the
    /// panic, so that what is read of it (its counts) is never taken for an empty writer's.
    pub fn get(&self) -> Result<Option<&T>> {
        match self.panicked {
            Some(_) => Err(gone(&self.panicked)),
            None => Ok(self.value.as_ref()),
        }
    }

    /// Runs `call` on the writer. A panic in it goes on, after the writer is dropped and the panic
    /// noted.
    pub fn with<R, E: From<Error>>(
        &mut self,
        call: impl FnOnce(&mut T) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let value = (self.value.as_mut()).ok_or_else(|| gone(&self.panicked))?;
        // Nothing is read of the writer after a panic: it is dropped.
        let done = catch_unwind(AssertUnwindSafe(|| call(value)));
        self.noted(done)
    }

    /// Takes the writer and runs `call` on it, to finish it: a panic in it is noted as `with`
    /// notes one, and later calls name it.
    pub fn finish<R, E: From<Error>>(
        &mut self,
        call: impl FnOnce(T) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let value = self.value.take().ok_or_else(|| gone(&self.panicked))?;
        let done = catch_unwind(AssertUnwindSafe(|| call(value)));
        self.noted(done)
    }

    /// What a call returned; a panic goes on, after the writer is dropped and the panic noted.
    fn noted<R>(&mut self, done: std::thread::Result<R>) -> R {
        done.unwrap_or_else(|panic| {
            self.panicked = Some(panic_message(&*panic).unwrap_or("no message").to_owned());
            self.value = None;
            resume_unwind(panic)
        })
    }

    /// Drops the writer, as an abort does: a writer that stopped stays stopped.
    pub fn close(&mut self) {
        self.value = None;
    }
}

/// Why a `Fenced` has no writer, given what its panic said, if it panicked.
fn gone(panicked: &Option<String>) -> Error {
    Error::Config(match panicked {
        None => "this writer is closed".into(),
        Some(why) => format!(
            "this writer stopped when a call failed on an internal error, a bug in fastfeed \
             (please report it): {why}. The records given to it since its last finished file \
             may be lost, and it has no manifest: write the feed again"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer after a call on it (finishing it, if `finishing`) panicked saying "it broke".
    fn broken(finishing: bool) -> Fenced<u64> {
        let mut fenced = Fenced::new(7);
        let panicked = catch_unwind(AssertUnwindSafe(|| match finishing {
            true => fenced.finish(|_| -> Result<()> { panic!("it broke") }),
            false => fenced.with(|_| -> Result<()> { panic!("it broke") }),
        }));
        assert!(panicked.is_err(), "the panic goes on");
        fenced
    }

    #[test]
    fn a_writer_stopped_by_a_panic_is_never_read_as_empty() {
        let fenced = broken(false);
        match fenced.get() {
            Err(e) => assert!(e.to_string().contains("it broke"), "{e}"),
            Ok(writer) => panic!("a stopped writer read as {writer:?}"),
        }
        // A writer closed as asked reads as none, its counts as 0.
        let mut closed = Fenced::new(7);
        assert_eq!(closed.finish(Ok::<_, Error>).unwrap(), 7);
        assert!(closed.get().unwrap().is_none());
    }

    #[test]
    fn a_panic_while_finishing_is_named_by_later_calls() {
        let mut fenced = broken(true);
        for again in [
            fenced.with(|_| Ok::<_, Error>(())),
            fenced.finish(|_| Ok::<_, Error>(())),
        ] {
            let why = again.unwrap_err().to_string();
            assert!(why.contains("it broke") && why.contains("a bug"), "{why}");
        }
        fenced.close();
        assert!(fenced.get().is_err(), "a writer that stopped stays stopped");
    }
}
