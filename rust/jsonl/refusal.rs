//! Refusals of records that break the schema, in words a user reads in the README, naming the
//! field at fault, whichever deserializer read the record (serde_json's, or `bindings::dict`).

use std::fmt::{Display, Write};

use crate::error::{listing, Error, RecordErrorKind};

/// The most characters of a value a refusal quotes: serde repeats the whole value it refuses,
/// and a line of 200 MB then made a reason of 200 MB, copied at each step to `rejected.log`.
const QUOTED: usize = 100;
/// The most characters of a refusal's message outside its quoted values (a quote left open by
/// a name holding a backtick is no longer a value).
const MESSAGE: usize = 2000;

/// The message of a deserializer's error `what`, each value it quotes (in `"` or backticks,
/// serde's quotes) cut to its first `QUOTED` characters, with how many it had: the one place
/// where the errors of a record's reading become the messages of refusals, which are held
/// until they are handed over, and written out.
fn message(what: impl Display) -> String {
    let mut cut = Cut {
        out: String::with_capacity(256),
        ..Cut::default()
    };
    // Writing into a `Cut` never fails.
    let _ = write!(cut, "{what}");
    cut.finish()
}

/// A message being written, cut as it goes (see `message`): the whole of it is never held.
#[derive(Default)]
struct Cut {
    out: String,
    /// The quote open, if any, the characters written inside it so far, and whether the last
    /// of them was a backslash (serde escapes the quotes of a value it quotes).
    quote: Option<char>,
    inside: usize,
    escaped: bool,
    /// The characters left out past `MESSAGE`.
    dropped: usize,
}

impl Cut {
    /// Appends `text`, as much of it as `MESSAGE` leaves room for.
    fn push(&mut self, text: &str) {
        let room = MESSAGE.saturating_sub(self.out.len());
        if text.len() <= room {
            self.out.push_str(text);
            return;
        }
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.out.push_str(&text[..end]);
        self.dropped += text[end..].chars().count();
    }

    fn close_quote(&mut self) {
        if self.inside > QUOTED {
            let quote = self.quote.unwrap_or('"');
            self.push(&format!("…{quote} ({} characters)", self.inside));
        }
        (self.quote, self.inside, self.escaped) = (None, 0, false);
    }

    fn finish(mut self) -> String {
        if self.quote.is_some() {
            self.close_quote();
        }
        if self.dropped > 0 {
            let dropped = self.dropped;
            let _ = write!(self.out, "… ({dropped} more characters)");
        }
        self.out
    }
}

impl Write for Cut {
    fn write_str(&mut self, mut s: &str) -> std::fmt::Result {
        while !s.is_empty() {
            let Some(quote) = self.quote else {
                // Up to the next quote, which opens a value.
                let end = s.find(['"', '`']).map_or(s.len(), |at| at + 1);
                self.push(&s[..end]);
                self.quote = s[..end].chars().last().filter(|c| matches!(c, '"' | '`'));
                s = &s[end..];
                continue;
            };
            // The value, up to its closing quote, a character at a time: serde escapes quotes
            // in it with a backslash. Its first `QUOTED` characters are kept.
            let (mut kept, mut closing) = (0, None);
            for (at, c) in s.char_indices() {
                if c == quote && !self.escaped {
                    closing = Some(at);
                    break;
                }
                self.escaped = !self.escaped && c == '\\' && quote == '"';
                self.inside += 1;
                if self.inside <= QUOTED {
                    kept = at + c.len_utf8();
                }
            }
            self.push(&s[..kept]);
            let Some(at) = closing else {
                break;
            };
            let cut = self.inside > QUOTED;
            self.close_quote();
            if !cut {
                self.push(&s[at..at + quote.len_utf8()]);
            }
            s = &s[at + quote.len_utf8()..];
        }
        Ok(())
    }
}

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
            message: message(msg),
        }))
    }
}

/// What an unknown field is told: a typo is far likelier than a field of another schema, so the
/// one meant is named when there is one; else the fields are listed.
pub fn unknown_field(name: &str, fields: &[&str]) -> String {
    let (message, listed) = unknown_field_listing(name, fields);
    listing(&message, listed.as_deref()).into_owned()
}

/// `unknown_field`'s message, and the fields it goes on to list, if it lists them (as a refusal
/// holds them: see `Error::with_listed`).
fn unknown_field_listing(name: &str, fields: &[&str]) -> (String, Option<String>) {
    match closest(name, fields) {
        Some(meant) => (
            format!("unknown field '{name}': did you mean '{meant}'?"),
            None,
        ),
        None => (format!("unknown field '{name}'"), Some(fields.join(", "))),
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
    let name = name.to_lowercase();
    fields
        .iter()
        .map(|f| (distance(&name, f), *f))
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
    let mut listed = None;
    if let Some((name, expected)) = message
        .strip_prefix("unknown field '")
        .and_then(|rest| rest.split_once('\''))
    {
        // serde goes on with the fields of the object the name is in (a record's, or a
        // principal's...), each in quotes: "..., expected one of 'url', 'action'".
        let known: Vec<&str> = expected.split('\'').skip(1).step_by(2).collect();
        (message, listed) = unknown_field_listing(name, &known);
        kind = RecordErrorKind::UnknownField;
    } else if message.starts_with("missing field") {
        kind = RecordErrorKind::Missing;
    }
    let field = top_field(path, fields);
    if message.ends_with(super::TIMESTAMP) {
        message = format!("expected {}", super::TIMESTAMP);
    } else if field == Some("metadata") && path.len() > "metadata.".len() {
        // Whatever is wrong in a value (a list item, say), it is named by its name; a value of
        // the wrong type is told the type, any other fault (a lone surrogate) its own words.
        let name = path["metadata.".len()..]
            .split('[')
            .next()
            .unwrap_or_default();
        message = if message.starts_with("invalid type") {
            format!("'{name}': expected a string or a list of strings")
        } else {
            format!("'{name}': {message}")
        };
    }
    Error::refused(kind, index, field, message).with_listed(listed)
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
    let message = message(err);
    let message = without_position(&message).to_owned();
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
