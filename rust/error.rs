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
    /// A full set closed with no records, which the writer was not told to allow (it would
    /// empty the source on the appliance), saying why and how to allow it.
    EmptyFull(String),
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
            Error::Config(message) | Error::EmptyFull(message) => f.write_str(message),
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

/// A writer and what became of it, so that each later call says so: a writer closed as asked
/// still tells what it kept (its final counts), one aborted tells that too, and refuses to be
/// finished; one refused as an empty full set tells its counts and is refused so again; one
/// whose finish failed names that failure; and one a panic (a bug) stopped names
/// the panic. The panic may have ended a call with rows on the encoding threads, taken by
/// neither its files nor an error: the writer is then dropped (as an abort drops it: the
/// unfinished file is removed) and every later call is refused, so that no caller goes on and
/// closes a feed that lacks those rows without a word, or reads its counts as an empty
/// writer's.
pub struct Fenced<T, K> {
    state: State<T, K>,
    /// What is kept of the writer once it is closed.
    keep: fn(&T) -> K,
}

enum State<T, K> {
    Open(T),
    Shut(Shut<K>),
}

/// What became of a writer that takes no more calls.
enum Shut<K> {
    /// Finished as asked, or aborted (`aborted`), keeping this of it.
    Closed { kept: K, aborted: bool },
    /// Its finish refused it as an empty full set (`Error::EmptyFull`), saying this.
    Empty { kept: K, why: String },
    /// Its finish failed, saying this.
    Failed(String),
    /// A call panicked, saying this.
    Stopped(String),
}

impl<T, K: Copy> Fenced<T, K> {
    /// `value`, of which `keep` is what stays readable once it is closed.
    pub fn new(value: T, keep: fn(&T) -> K) -> Self {
        Fenced {
            state: State::Open(value),
            keep,
        }
    }

    /// What `keep` reads of the writer, or read of it when it was closed; a writer whose finish
    /// failed, or that stopped, is refused, naming why, so that its counts are never taken for
    /// those of an empty writer.
    pub fn read(&self) -> Result<K> {
        match &self.state {
            State::Open(value) => Ok((self.keep)(value)),
            State::Shut(Shut::Closed { kept, .. } | Shut::Empty { kept, .. }) => Ok(*kept),
            State::Shut(shut) => Err(shut.error()),
        }
    }

    /// Runs `call` on the writer. A panic in it goes on, after the writer is dropped and the panic
    /// noted.
    pub fn with<R, E: From<Error>>(
        &mut self,
        call: impl FnOnce(&mut T) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let value = match &mut self.state {
            State::Open(value) => value,
            State::Shut(shut) => return Err(shut.error().into()),
        };
        // Nothing is read of the writer after a panic: it is dropped.
        let done = catch_unwind(AssertUnwindSafe(|| call(value)));
        self.noted(done)
    }

    /// Takes the writer and runs `call` on it, to finish it, with what is kept of it, for
    /// `call` to bring up to date (the files it finished): what it returns decides what later
    /// calls say (closed, or that this failure ended it); a panic in it is noted as `with`
    /// notes one.
    pub fn finish<R>(&mut self, call: impl FnOnce(T, &mut K) -> Result<R>) -> Result<R> {
        // Failed until `call` returns: nothing is left of the writer if it panics.
        let value = match std::mem::replace(&mut self.state, State::Shut(Shut::Failed("".into()))) {
            State::Open(value) => value,
            State::Shut(shut) => {
                let error = shut.error();
                self.state = State::Shut(shut);
                return Err(error);
            }
        };
        let mut kept = (self.keep)(&value);
        let done = self.noted(catch_unwind(AssertUnwindSafe(|| call(value, &mut kept))));
        self.state = State::Shut(match &done {
            Ok(_) => Shut::Closed {
                kept,
                aborted: false,
            },
            Err(Error::EmptyFull(why)) => Shut::Empty {
                kept,
                why: why.clone(),
            },
            Err(e) => Shut::Failed(e.to_string()),
        });
        done
    }

    /// What a call returned; a panic goes on, after the writer is dropped and the panic noted.
    fn noted<R>(&mut self, done: std::thread::Result<R>) -> R {
        done.unwrap_or_else(|panic| {
            let why = panic_message(&*panic).unwrap_or("no message").to_owned();
            self.state = State::Shut(Shut::Stopped(why));
            resume_unwind(panic)
        })
    }

    /// Drops an open writer, as an abort does (its unfinished file is removed); a writer
    /// closed, failed or stopped stays so.
    pub fn abort(&mut self) {
        if let State::Open(value) = &self.state {
            let kept = (self.keep)(value);
            self.state = State::Shut(Shut::Closed {
                kept,
                aborted: true,
            });
        }
    }
}

impl<K> Shut<K> {
    /// Why the writer takes no more calls.
    fn error(&self) -> Error {
        Error::Config(match self {
            Shut::Empty { why, .. } => return Error::EmptyFull(why.clone()),
            Shut::Closed { aborted: false, .. } => "this writer is closed".into(),
            Shut::Closed { aborted: true, .. } => "this writer was aborted, so it has no \
                 manifest (its finished files stay, the unfinished one was removed): write the \
                 feed again"
                .into(),
            Shut::Failed(why) => format!(
                "this writer's close failed: {why}. It has no manifest: write the feed again"
            ),
            Shut::Stopped(why) => format!(
                "this writer stopped when a call failed on an internal error, a bug in fastfeed \
                 (please report it): {why}. The records given to it since its last finished file \
                 may be lost, and it has no manifest: write the feed again"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer of 7 records, its count kept once it is closed.
    fn writer() -> Fenced<u64, u64> {
        Fenced::new(7, |records| *records)
    }

    /// A writer after a call on it (finishing it, if `finishing`) panicked saying "it broke".
    fn broken(finishing: bool) -> Fenced<u64, u64> {
        let mut fenced = writer();
        let panicked = catch_unwind(AssertUnwindSafe(|| match finishing {
            true => fenced.finish(|_, _| -> Result<()> { panic!("it broke") }),
            false => fenced.with(|_| -> Result<()> { panic!("it broke") }),
        }));
        assert!(panicked.is_err(), "the panic goes on");
        fenced
    }

    /// What each later call says of `fenced`: a read, a call, a finish.
    fn later(fenced: &mut Fenced<u64, u64>) -> [std::result::Result<u64, String>; 3] {
        let said = |done: Result<u64>| done.map_err(|e| e.to_string());
        [
            said(fenced.read()),
            said(fenced.with(|n| Ok(*n))),
            said(fenced.finish(|n, _| Ok(n))),
        ]
    }

    #[test]
    fn a_writer_stopped_by_a_panic_is_never_read_as_empty() {
        let fenced = broken(false);
        match fenced.read() {
            Err(e) => assert!(e.to_string().contains("it broke"), "{e}"),
            Ok(records) => panic!("a stopped writer read as {records} records"),
        }
    }

    #[test]
    fn a_panic_while_finishing_is_named_by_later_calls() {
        let mut fenced = broken(true);
        fenced.abort();
        for said in later(&mut fenced) {
            let why = said.unwrap_err();
            assert!(why.contains("it broke") && why.contains("a bug"), "{why}");
        }
    }

    #[test]
    fn a_closed_writer_keeps_its_counts_and_refuses_more_saying_how_it_was_closed() {
        let mut closed = writer();
        let finished = closed.finish(|n, kept| {
            *kept += 1;
            Ok::<_, Error>(n)
        });
        assert_eq!(finished.unwrap(), 7);
        closed.abort();
        let closed_said = "this writer is closed".to_owned();
        assert_eq!(
            later(&mut closed),
            [Ok(8), Err(closed_said.clone()), Err(closed_said)]
        );

        let mut aborted = writer();
        aborted.abort();
        let [read, call, finish] = later(&mut aborted);
        assert_eq!(read, Ok(7));
        for said in [call, finish] {
            assert!(said.unwrap_err().starts_with("this writer was aborted"));
        }
    }

    #[test]
    fn a_failed_close_is_named_by_later_calls_never_read_as_empty() {
        let mut failed = writer();
        let closing = failed.finish(|_, _| Err::<u64, _>(Error::Config("the disk is gone".into())));
        assert!(closing.is_err());
        failed.abort();
        for said in later(&mut failed) {
            let why = said.unwrap_err();
            assert!(
                why.starts_with("this writer's close failed: the disk is gone."),
                "{why}"
            );
        }
    }
}
