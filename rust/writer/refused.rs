//! The lines a writer set aside while it skips refused ones (`FeedWriter::skip_refused`), held
//! compact until they are taken: as whole errors, then all turned into Python exceptions at
//! once, a chunk of 2 million tiny refused lines took 1.5 GB.

use std::collections::VecDeque;

use crate::error::{Error, RecordErrorKind};

/// How many of the last distinct reasons a new one is compared with: refused lines come in runs
/// of a few reasons (every line of a broken export is wrong the same way), each then held once.
const RECENT: usize = 8;

/// The lines of a piece of a chunk set aside, in line order: 8 bytes each, and each reason
/// once, unless more than `RECENT` others came between (a reason naming its line's value, such
/// as a missing file, takes about its line's size and 24 bytes).
#[derive(Default)]
pub(super) struct Refusals {
    /// Each line's index, from the piece's first line, and its reason's place in `reasons`.
    lines: Vec<(u32, u32)>,
    reasons: Vec<Reason>,
    /// The reasons' messages, back to back, each without its list of fields.
    text: String,
    /// The lists of fields the reasons go on to, each once: an unknown field's message lists
    /// the fields of the object (see `jsonl::unknown_field`), the same for every line, and 10
    /// times a short name's words. Each name of a file's unknown fields made a reason of its
    /// own, of 200 bytes.
    lists: Vec<String>,
}

struct Reason {
    kind: RecordErrorKind,
    field: Option<&'static str>,
    /// Where its message ends in `text`; it starts where the reason before ends.
    end: u32,
    /// The list of fields its message ends with: none if 0, else `lists[list - 1]`.
    list: u16,
}

impl Refusals {
    pub(super) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Sets aside the line a refusal names, after those set aside before it. Gives back what it
    /// cannot hold: an error that is no refusal of a record, or a refusal past 4 G lines or 4 GB
    /// of reasons into its piece (no chunk a build reads: 4 MB), which then fails the piece as
    /// it would without skipping.
    pub(super) fn set_aside(&mut self, e: Error) -> Result<(), Error> {
        let Error::Record {
            index,
            field,
            message,
            kind,
            listed,
        } = &e
        else {
            return Err(e);
        };
        let Ok(line) = u32::try_from(*index) else {
            return Err(e);
        };
        let list = match listed {
            Some(listed) => match self.list(listed) {
                Some(list) => list,
                None => return Err(e),
            },
            None => 0,
        };
        let recent = self.reasons.len().saturating_sub(RECENT);
        let known = (recent..self.reasons.len()).rev().find(|&at| {
            let reason = &self.reasons[at];
            reason.kind == *kind
                && reason.field == *field
                && reason.list == list
                && self.message(at) == message
        });
        let at = match known {
            Some(at) => at,
            None => {
                let Ok(end) = u32::try_from(self.text.len() + message.len()) else {
                    return Err(e);
                };
                self.text.push_str(message);
                self.reasons.push(Reason {
                    kind: *kind,
                    field: *field,
                    end,
                    list,
                });
                self.reasons.len() - 1
            }
        };
        // As many reasons as lines at most, and lines fit.
        self.lines.push((line, at as u32));
        Ok(())
    }

    /// Gives back the room its vectors grew into beyond what they hold: it waits until its chunk
    /// is taken, while the chunk after is encoded.
    pub(super) fn shrink_to_fit(&mut self) {
        self.lines.shrink_to_fit();
        self.reasons.shrink_to_fit();
        self.text.shrink_to_fit();
    }

    /// The place of list of fields `list` in `lists`, from 1, added if it is new; none past
    /// the places a reason holds (lists of that many schemas).
    fn list(&mut self, list: &str) -> Option<u16> {
        let at = match self.lists.iter().position(|known| known == list) {
            Some(at) => at,
            None => {
                self.lists.push(list.to_owned());
                self.lists.len() - 1
            }
        };
        u16::try_from(at + 1).ok()
    }

    /// The list of fields reason `at` goes on to, if any.
    fn listed(&self, at: usize) -> Option<String> {
        let list = self.reasons[at].list as usize;
        list.checked_sub(1).map(|list| self.lists[list].clone())
    }

    fn message(&self, at: usize) -> &str {
        let start = at
            .checked_sub(1)
            .map_or(0, |before| self.reasons[before].end);
        &self.text[start as usize..self.reasons[at].end as usize]
    }
}

/// The refusals of the chunks taken, not yet handed over, in input order.
#[derive(Default)]
pub(super) struct Refused {
    /// Each piece's refusals, with the line of its chunk the piece starts at.
    pieces: VecDeque<(usize, Refusals)>,
    /// How many of the first piece's lines were handed over.
    handed: usize,
}

impl Refused {
    /// Keeps the refusals of a piece whose first line is line `first` of its chunk.
    pub(super) fn push(&mut self, first: usize, refusals: Refusals) {
        if !refusals.is_empty() {
            self.pieces.push_back((first, refusals));
        }
    }

    /// Hands over up to `most` refusals, the oldest first, each indexed by its line in its
    /// chunk; what is handed over is no longer held.
    pub(super) fn take(&mut self, most: usize) -> Vec<Error> {
        let mut out = Vec::new();
        while out.len() < most {
            let Some((first, piece)) = self.pieces.front() else {
                break;
            };
            let end = piece.lines.len().min(self.handed + most - out.len());
            out.extend(piece.lines[self.handed..end].iter().map(|&(line, at)| {
                let reason = &piece.reasons[at as usize];
                let at = at as usize;
                Error::refused(
                    reason.kind,
                    first + line as usize,
                    reason.field,
                    piece.message(at),
                )
                .with_listed(piece.listed(at))
            }));
            self.handed = end;
            if end == piece.lines.len() {
                self.pieces.pop_front();
                self.handed = 0;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(index: usize, field: Option<&'static str>, message: &str) -> Error {
        Error::refused(RecordErrorKind::Invalid, index, field, message)
    }

    fn described(errors: Vec<Error>) -> Vec<String> {
        errors.iter().map(Error::to_string).collect()
    }

    #[test]
    fn refusals_come_back_in_order_in_batches_each_once_with_their_reason() {
        let mut piece = Refusals::default();
        for (index, field, message) in [
            (0, None, "a"),
            (2, Some("url"), "a"),
            (3, None, "a"),
            (7, None, "b"),
            (9, None, "a"),
        ] {
            piece.set_aside(refusal(index, field, message)).unwrap();
        }
        // "a" without a field is held once, as is "a" of `url`, and "b".
        assert_eq!(piece.text, "aab");
        let mut later = Refusals::default();
        later.set_aside(refusal(1, None, "c")).unwrap();
        let mut refused = Refused::default();
        refused.push(10, piece);
        refused.push(20, Refusals::default());
        refused.push(30, later);
        assert_eq!(
            described(refused.take(2)),
            ["record 10: a", "record 12: field 'url': a"]
        );
        assert_eq!(
            described(refused.take(3)),
            ["record 13: a", "record 17: b", "record 19: a"]
        );
        assert_eq!(described(refused.take(5)), ["record 31: c"]);
        assert!(refused.take(5).is_empty());
    }

    #[test]
    fn what_is_no_refusal_of_a_held_line_is_given_back() {
        let mut piece = Refusals::default();
        let io = Error::io("/x", std::io::Error::other("gone"));
        assert!(matches!(piece.set_aside(io), Err(Error::Io { .. })));
        let far = refusal(1 << 32, None, "a");
        assert!(matches!(piece.set_aside(far), Err(Error::Record { .. })));
        assert!(piece.is_empty());
    }

    #[test]
    fn a_reason_seen_more_than_recent_reasons_ago_is_held_again() {
        let mut piece = Refusals::default();
        for (index, message) in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "a", "i"]
            .into_iter()
            .enumerate()
        {
            piece.set_aside(refusal(index, None, message)).unwrap();
        }
        assert_eq!(piece.text, "abcdefghia");
        let mut refused = Refused::default();
        refused.push(0, piece);
        let messages: Vec<String> = refused.take(100).iter().map(Error::to_string).collect();
        assert_eq!(messages[9], "record 9: a");
        assert_eq!(messages[10], "record 10: i");
    }

    #[test]
    fn the_list_of_fields_unknown_fields_end_with_is_held_once() {
        let mut piece = Refusals::default();
        let list = "url, action, content";
        for (index, name) in ["k1", "k2", "k3"].into_iter().enumerate() {
            let message = format!("unknown field '{name}'");
            let listing = refusal(index, None, &message).with_listed(Some(list.into()));
            piece.set_aside(listing).unwrap();
        }
        piece
            .set_aside(refusal(3, None, "unknown field 'k1'"))
            .unwrap();
        assert_eq!(
            piece.text,
            "unknown field 'k1'unknown field 'k2'unknown field 'k3'unknown field 'k1'"
        );
        let mut refused = Refused::default();
        refused.push(0, piece);
        assert_eq!(
            described(refused.take(4)),
            [
                format!("record 0: unknown field 'k1' (fields: {list})"),
                format!("record 1: unknown field 'k2' (fields: {list})"),
                format!("record 2: unknown field 'k3' (fields: {list})"),
                "record 3: unknown field 'k1'".to_owned(),
            ]
        );
    }
}
