//! Refusals of records that break the schema, in words a user reads in the README, naming the
//! field at fault, whichever deserializer read the record (serde_json's, or `bindings::dict`).

use crate::error::{Error, RecordErrorKind};

/// serde's messages end with a position inside the line, which the caller already names.
fn without_position(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

/// An error of a deserializer that reads records from other objects than JSON text: what is
/// wrong, and where (like `metadata.tags[0]`, as serde_path_to_error says it), built from the
/// inside out as the error leaves each nested value. Boxed, as serde_json's errors are: every
/// value read returns a `Result` with it, which stays one word.
#[derive(Debug)]
pub struct ReadError(Box<Where>);

#[derive(Debug)]
struct Where {
    path: String,
    message: String,
}

impl ReadError {
    /// The error, as met in the value of `key` in a map.
    pub fn in_key(mut self, key: &str) -> Self {
        let path = &mut self.0.path;
        *path = match path.chars().next() {
            None => key.to_owned(),
            Some('[') => format!("{key}{path}"),
            Some(_) => format!("{key}.{path}"),
        };
        self
    }

    /// The error, as met in item `at` of a list.
    pub fn in_item(mut self, at: usize) -> Self {
        let path = &mut self.0.path;
        *path = match path.chars().next() {
            None | Some('[') => format!("[{at}]{path}"),
            Some(_) => format!("[{at}].{path}"),
        };
        self
    }

    /// The refusal of the record at `index` it makes, `fields` being the record's.
    pub(super) fn refusal(&self, index: usize, fields: &[&'static str]) -> Error {
        refusal(index, &self.0.path, &self.0.message, fields)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for ReadError {}

impl serde::de::Error for ReadError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        ReadError(Box::new(Where {
            path: String::new(),
            message: msg.to_string(),
        }))
    }
}

/// What an unknown field is told: a typo is far likelier than a field of another schema, so the
/// one meant is named when there is one; else the fields are listed.
pub fn unknown_field(name: &str, fields: &[&str]) -> String {
    match closest(name, fields) {
        Some(meant) => format!("unknown field '{name}': did you mean '{meant}'?"),
        None => format!("unknown field '{name}' (fields: {})", fields.join(", ")),
    }
}

/// The field a mistyped name most likely meant: at most two edits away (one for short names).
fn closest<'f>(name: &str, fields: &[&'f str]) -> Option<&'f str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut previous = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let next = (previous + usize::from(ca != *cb))
                    .min(row[j] + 1)
                    .min(row[j + 1] + 1);
                previous = row[j + 1];
                row[j + 1] = next;
            }
        }
        row[b.len()]
    };
    let allowed = if name.chars().count() <= 4 { 1 } else { 2 };
    fields
        .iter()
        .map(|f| (distance(&name.to_lowercase(), f), *f))
        .filter(|(d, _)| *d <= allowed)
        .min()
        .map(|(_, f)| f)
}

/// The top field of a path like `metadata.tags[0]`, if it is one of `fields`.
fn top_field(path: &str, fields: &[&'static str]) -> Option<&'static str> {
    let top = path.split(['.', '[']).next().unwrap_or("");
    fields.iter().find(|f| **f == top).copied()
}

/// serde's words, as the README says them.
fn tidy(message: &str) -> String {
    message
        .replace("expected i64", "expected an integer")
        .replace("expected a boolean", "expected true or false")
        .replace("expected path string", "expected a file path")
        .replace('`', "'")
}

/// Turns serde's error at `path` (like `metadata.tags[0]`), whatever read the record, into a
/// refusal naming the top field, with its kind.
pub(super) fn refusal(index: usize, path: &str, message: &str, fields: &[&'static str]) -> Error {
    let mut message = tidy(message);
    let mut kind = RecordErrorKind::Invalid;
    if let Some((name, expected)) = message
        .strip_prefix("unknown field '")
        .and_then(|rest| rest.split_once('\''))
    {
        // serde goes on with the fields of the object the name is in (a record's, or a
        // principal's...), each in quotes: "..., expected one of 'url', 'action'".
        let known: Vec<&str> = expected.split('\'').skip(1).step_by(2).collect();
        message = unknown_field(name, &known);
        kind = RecordErrorKind::UnknownField;
    } else if message.starts_with("missing field") {
        kind = RecordErrorKind::Missing;
    }
    let field = top_field(path, fields);
    if message.ends_with(super::TIMESTAMP) {
        message = format!("expected {}", super::TIMESTAMP);
    } else if field == Some("metadata") && path.len() > "metadata.".len() {
        // Whatever is wrong in a value (a list item, say), it is named by its name.
        let name = path["metadata.".len()..]
            .split('[')
            .next()
            .unwrap_or_default();
        message = format!("'{name}': expected a string or a list of strings");
    }
    Error::refused(kind, index, field, message)
}

/// Turns serde_json's error at `path` into a refusal; see `refusal`.
pub(super) fn json_error(
    index: usize,
    line: &[u8],
    path: &str,
    err: &serde_json::Error,
    fields: &[&'static str],
) -> Error {
    if let Err(e) = std::str::from_utf8(line) {
        // serde says "invalid unicode code point"; say where the bad byte is.
        return Error::refused(
            RecordErrorKind::NotJson,
            index,
            top_field(path, fields),
            format!("not valid UTF-8 (byte {} of the line)", e.valid_up_to()),
        );
    }
    let message = without_position(&err.to_string()).to_owned();
    if err.is_data() || top_field(path, fields).is_some() {
        return refusal(index, path, &message, fields);
    }
    Error::refused(
        RecordErrorKind::NotJson,
        index,
        None,
        format!("not a JSON object: {}", tidy(&message)),
    )
}
