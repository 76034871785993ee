//! A feed record: the JSON Lines schema, its protocol rules, and its XML form.

use std::borrow::Cow;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Utc};
use std::io::Read;
use std::path::PathBuf;

use crate::acl::Acl;
use crate::encode::{base64_into, decode_base64_into, Compress, Encoding, Scratch};
use crate::error::{Error, RecordErrorKind, Result};
use crate::escape::{escape_into, first_unrepresentable, Context};
use crate::url::{check_url, url_path};
use crate::wide::Wide;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Add,
    Delete,
    /// Thunderstone only: update the fields given, leave the others.
    Update,
    /// Thunderstone only: delete every URL the pattern (with `*`) matches.
    DeletePattern,
}

/// Why `s` is not an action.
pub fn action_error(s: &str) -> String {
    format!(
        "'{s}' is not an action: use add or delete (Thunderstone feeds also take update and \
         delete-pattern)"
    )
}

impl Action {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "add" => Some(Action::Add),
            "delete" => Some(Action::Delete),
            "update" => Some(Action::Update),
            "delete-pattern" => Some(Action::DeletePattern),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMethod {
    None,
    HttpBasic,
    Ntlm,
    HttpSso,
}

impl AuthMethod {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(AuthMethod::None),
            "httpbasic" => Some(AuthMethod::HttpBasic),
            "ntlm" => Some(AuthMethod::Ntlm),
            "httpsso" => Some(AuthMethod::HttpSso),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::HttpBasic => "httpbasic",
            AuthMethod::Ntlm => "ntlm",
            AuthMethod::HttpSso => "httpsso",
        }
    }
}

/// A record's content, as the user gave it. Borrowed where it can be: contents are the bulk of
/// a corpus, and copying them costs more than encoding them.
#[derive(Clone, Debug)]
pub enum Content<'a> {
    /// Text: sent as XML text when XML can carry it.
    Text(Cow<'a, str>),
    /// Text as a Python `str` holds it, made UTF-8 on a worker thread.
    Wide(Wide<'a>),
    /// Binary: always base64, maybe compressed.
    Bytes(Cow<'a, [u8]>),
    /// Binary the user gave in base64 (`content_base64`); decoded on a worker thread.
    Base64(Cow<'a, str>),
    /// A file read at build time (`content_path`).
    Path(PathBuf),
}

impl Content<'_> {
    fn field(&self) -> &'static str {
        match self {
            Content::Text(_) | Content::Wide(_) | Content::Bytes(_) => "content",
            Content::Base64(_) => "content_base64",
            Content::Path(_) => "content_path",
        }
    }

    /// About how much work encoding this content is; a file's size is not known before it is
    /// read, so a typical document's stands for it.
    fn weight(&self) -> usize {
        match self {
            Content::Text(s) | Content::Base64(s) => s.len(),
            Content::Wide(w) => w.units(),
            Content::Bytes(b) => b.len(),
            Content::Path(_) => 16 * 1024,
        }
    }

    /// The bytes to send, and their text when they may travel as XML text. `buf` receives
    /// decoded base64, a file's bytes or text made UTF-8.
    pub(crate) fn resolve<'s>(
        &'s self,
        index: usize,
        mimetype: &str,
        buf: &'s mut Vec<u8>,
    ) -> Result<(&'s [u8], Option<&'s str>)> {
        let field = self.field();
        Ok(match self {
            Content::Text(s) => (s.as_bytes(), Some(s)),
            Content::Wide(w) => {
                let text = match w.ascii() {
                    Some(ascii) => ascii,
                    None => w.to_utf8(buf).map_err(|_| {
                        Error::record(
                            index,
                            Some(field),
                            "is not valid Unicode (it holds a lone surrogate)",
                        )
                    })?,
                };
                (text.as_bytes(), Some(text))
            }
            Content::Bytes(b) => (b, None),
            Content::Base64(s) => {
                decode_base64_into(s, buf).map_err(|m| Error::record(index, Some(field), m))?;
                (buf, None)
            }
            Content::Path(p) => {
                read_content_file(p, buf).map_err(|m| {
                    Error::refused(RecordErrorKind::Unreadable, index, Some(field), m)
                })?;
                // A file is text when its type says so and its bytes are UTF-8.
                let text = is_textual(mimetype)
                    .then(|| std::str::from_utf8(buf).ok())
                    .flatten();
                (buf, text)
            }
        })
    }
}

/// Reads a `content_path` file into `buf`: only a regular file (a FIFO would block the build,
/// a device never end), and no more than the hard ceiling on a feed file, which no content
/// larger can fit under (a file that grows while read stops there too).
fn read_content_file(path: &std::path::Path, buf: &mut Vec<u8>) -> std::result::Result<(), String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Opening a FIFO for reading waits for a writer: O_NONBLOCK returns at once, and fstat then
    // tells what it is. It changes nothing for a regular file's reads.
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file (a FIFO, socket or device)",
            path.display()
        ));
    }
    let limit = crate::writer::HARD_MAX_BYTES;
    if meta.len() > limit {
        return Err(format!(
            "{} is {} bytes, more than a feed file can hold ({limit}): feed its URL in a web \
             feed instead",
            path.display(),
            meta.len()
        ));
    }
    buf.clear();
    buf.reserve(meta.len() as usize);
    file.take(limit + 1).read_to_end(buf).map_err(cannot)?;
    if buf.len() as u64 > limit {
        return Err(format!(
            "{} grew past {limit} bytes while it was read",
            path.display()
        ));
    }
    Ok(())
}

/// `last_modified` before it is checked: a string, or seconds since the epoch.
#[derive(Clone, Debug)]
pub enum Timestamp {
    Text(String),
    Epoch(f64),
}

#[derive(Clone, Debug, Default)]
pub struct Record<'a> {
    pub url: String,
    pub action: Option<Action>,
    pub mimetype: Option<String>,
    pub displayurl: Option<String>,
    pub last_modified: Option<Timestamp>,
    pub lock: Option<bool>,
    pub authmethod: Option<AuthMethod>,
    pub pagerank: Option<i64>,
    pub crawl_immediately: Option<bool>,
    pub crawl_once: Option<bool>,
    /// Name and value pairs; a name given several values appears several times, in input order.
    pub metadata: Vec<(String, String)>,
    pub content: Option<Content<'a>>,
    pub acl: Option<Acl>,
    /// `overwrite-acls` of the record's metadata.
    pub overwrite_acls: Option<bool>,
    /// `"kind": "acl"`: an ACL for a URL that is not a document (a folder, a share), written
    /// as an `<acl url>` of the group; it carries only `url` and `acl`.
    pub standalone_acl: bool,
}

/// What kind of feed a record goes into, which decides the rules it must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedType {
    Full,
    Incremental,
    MetadataAndUrl,
}

impl FeedType {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "full" => Some(FeedType::Full),
            "incremental" => Some(FeedType::Incremental),
            "metadata-and-url" => Some(FeedType::MetadataAndUrl),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FeedType::Full => "full",
            FeedType::Incremental => "incremental",
            FeedType::MetadataAndUrl => "metadata-and-url",
        }
    }
}

/// The feed a record is checked against.
#[derive(Clone, Copy, Debug)]
pub struct FeedKind {
    pub feedtype: FeedType,
    /// The `web` datasource: a web feed, URLs only, whatever the feed type.
    pub web: bool,
}

impl FeedKind {
    fn carries_content(self) -> bool {
        !self.web && self.feedtype != FeedType::MetadataAndUrl
    }
}

/// How ACLs are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclFormat {
    /// The `<acl>` element of software 7.0 and later.
    PerUrl,
    /// The google:acl* meta names that appliances before 7.0 read.
    Legacy,
}

impl AclFormat {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "per-url" => Some(AclFormat::PerUrl),
            "legacy" => Some(AclFormat::Legacy),
            _ => None,
        }
    }
}

/// How records are encoded.
#[derive(Clone, Copy, Debug)]
pub struct EncodeOptions {
    pub compress: Compress,
    pub acl_format: AclFormat,
}

/// Whether a MIME type names text that may travel as XML text.
/// A MIME type as RFC 2045 writes one: `type/subtype`, of token characters, and parameters
/// after `;` without control characters. What is not one (`"/><record`) is refused here, for
/// every receiver alike.
pub fn check_mimetype(mimetype: &str) -> std::result::Result<(), String> {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    let (essence, params) = match mimetype.split_once(';') {
        Some((essence, params)) => (essence.trim_end(), params),
        None => (mimetype, ""),
    };
    let well_formed = essence
        .split_once('/')
        .is_some_and(|(t, s)| token(t) && token(s))
        && !params.chars().any(|c| c.is_control());
    if well_formed {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a MIME type like text/plain",
            mimetype.escape_debug()
        ))
    }
}

fn is_textual(mimetype: &str) -> bool {
    let essence = mimetype
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+xml")
        || essence.ends_with("+json")
        || matches!(
            essence.as_str(),
            "application/xml" | "application/json" | "application/javascript" | "application/x-sh"
        )
}

/// The moment `last_modified` names, and its text when it was given in RFC 822 (which a GSA
/// feed passes through as given).
pub(crate) fn parse_date(
    ts: &Timestamp,
) -> std::result::Result<(DateTime<Utc>, Option<&str>), String> {
    let (t, rfc822) = parse_any_date(ts)?;
    // RFC 822 and Thunderstone dates have four-digit years.
    if !(1..=9999).contains(&t.year()) {
        return Err(format!(
            "the year {} cannot be written in a feed (years 1 to 9999)",
            t.year()
        ));
    }
    Ok((t, rfc822))
}

fn parse_any_date(ts: &Timestamp) -> std::result::Result<(DateTime<Utc>, Option<&str>), String> {
    let from_epoch = |secs: f64| {
        // `{secs:e}` for the messages: 1e300 would print as a 301-digit number.
        if !secs.is_finite() {
            return Err(format!("{secs:e} is not a time"));
        }
        DateTime::<Utc>::from_timestamp(secs.floor() as i64, 0)
            .map(|t| (t, None))
            .ok_or_else(|| format!("{secs:e} seconds since the epoch is out of range"))
    };
    let text = match ts {
        Timestamp::Epoch(secs) => return from_epoch(*secs),
        Timestamp::Text(t) => t.trim(),
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        if let Ok(secs) = text.parse::<f64>() {
            return from_epoch(secs);
        }
    }
    if let Ok(t) = DateTime::parse_from_rfc2822(text) {
        return Ok((t.with_timezone(&Utc), Some(text)));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok((t.with_timezone(&Utc), None));
    }
    // ISO 8601 without an offset is taken as UTC.
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, fmt) {
            return Ok((t.and_utc(), None));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok((d.and_hms_opt(0, 0, 0).expect("midnight").and_utc(), None));
    }
    Err(format!(
        "'{text}' is not a date: use RFC 822 (Tue, 6 Nov 2007 12:45:26 GMT), \
         ISO 8601 (2007-11-06T12:45:26Z) or seconds since the epoch"
    ))
}

/// `last_modified` for a GSA feed: RFC 822 as given, or converted to it in GMT.
fn normalize_date(ts: &Timestamp) -> std::result::Result<String, String> {
    Ok(match parse_date(ts)? {
        (_, Some(rfc822)) => rfc822.to_owned(),
        (t, None) => t.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
    })
}

fn guess_mimetype(path: &str) -> Option<&'static str> {
    mime_guess::from_path(path).first_raw()
}

/// Refuses, naming the field, a character XML cannot carry in a field that has no base64 form.
fn representable(index: usize, field: &'static str, value: &str) -> Result<()> {
    match first_unrepresentable(value) {
        None => Ok(()),
        Some(at) => {
            let c = value[at..].chars().next().unwrap_or_default();
            Err(Error::record(
                index,
                Some(field),
                format!(
                    "contains U+{:04X} at byte {at}, a character XML cannot carry in this field",
                    u32::from(c)
                ),
            ))
        }
    }
}

/// A record checked against its feed, ready to be written.
struct Checked<'r, 'a> {
    record: &'r Record<'a>,
    mimetype: &'r str,
    last_modified: Option<String>,
    /// Sorted by name, repeated names in input order: the input's own when it already is.
    metadata: Cow<'r, [(String, String)]>,
}

impl<'a> Record<'a> {
    /// About how much work encoding this record is, to share a batch evenly among threads.
    pub(crate) fn weight(&self) -> usize {
        self.url.len() + self.content.as_ref().map_or(0, Content::weight)
    }

    /// The record's MIME type: given, or guessed from its file or URL, or from its content.
    pub(crate) fn mimetype(&self, index: usize) -> Result<&str> {
        if let Some(m) = &self.mimetype {
            representable(index, "mimetype", m)?;
            if m.trim().is_empty() {
                return Err(Error::record(index, Some("mimetype"), "is empty"));
            }
            check_mimetype(m).map_err(|e| Error::record(index, Some("mimetype"), e))?;
            return Ok(m);
        }
        let guessed = match &self.content {
            Some(Content::Path(p)) => guess_mimetype(&p.to_string_lossy()),
            _ => None,
        };
        Ok(guessed
            .or_else(|| guess_mimetype(url_path(&self.url)))
            .unwrap_or(match &self.content {
                Some(Content::Bytes(_) | Content::Base64(_) | Content::Path(_)) => {
                    "application/octet-stream"
                }
                _ => "text/plain",
            }))
    }

    pub(crate) fn check_url(&self, index: usize) -> Result<()> {
        let err = |msg: String| Error::record(index, Some("url"), msg);
        if self.url.is_empty() {
            return Err(Error::refused(
                RecordErrorKind::Missing,
                index,
                Some("url"),
                "is required",
            ));
        }
        representable(index, "url", &self.url)?;
        check_url(&self.url).map_err(err)
    }

    /// The first field a standalone ACL must not carry, if any.
    fn field_besides_acl(&self) -> Option<&'static str> {
        [
            ("action", self.action.is_some()),
            ("mimetype", self.mimetype.is_some()),
            ("displayurl", self.displayurl.is_some()),
            ("last_modified", self.last_modified.is_some()),
            ("lock", self.lock.is_some()),
            ("authmethod", self.authmethod.is_some()),
            ("pagerank", self.pagerank.is_some()),
            ("crawl_immediately", self.crawl_immediately.is_some()),
            ("crawl_once", self.crawl_once.is_some()),
            ("metadata", !self.metadata.is_empty()),
            ("content", self.content.is_some()),
            ("overwrite_acls", self.overwrite_acls.is_some()),
        ]
        .into_iter()
        .find_map(|(field, given)| given.then_some(field))
    }

    /// Checks and writes a standalone ACL: `<acl url=...>` in the group.
    fn encode_standalone_acl(
        &self,
        index: usize,
        opts: EncodeOptions,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let err = |field: &'static str, msg: &str| Error::record(index, Some(field), msg);
        self.check_url(index)?;
        let Some(acl) = &self.acl else {
            return Err(err("acl", "a standalone ACL (kind acl) needs an acl"));
        };
        if let Some(field) = self.field_besides_acl() {
            return Err(Error::refused(
                RecordErrorKind::NotAllowed,
                index,
                Some(field),
                "a standalone ACL (kind acl) carries only url and acl",
            ));
        }
        if opts.acl_format == AclFormat::Legacy {
            return Err(err(
                "kind",
                "the legacy ACL format is metadata of documents: it has no standalone ACLs",
            ));
        }
        acl.check()
            .map_err(|m| Error::record(index, Some("acl"), m))?;
        acl.write(out, Some(&self.url));
        Ok(())
    }

    /// Applies the protocol's rules; `index` names the record in errors.
    fn check(&self, index: usize, kind: FeedKind, opts: EncodeOptions) -> Result<Checked<'_, 'a>> {
        let err = |field: &'static str, msg: String| Error::record(index, Some(field), msg);
        let not_allowed = |field: &'static str, msg: &str| {
            Error::refused(RecordErrorKind::NotAllowed, index, Some(field), msg)
        };
        let representable = |field: &'static str, value: &str| representable(index, field, value);

        self.check_url(index)?;
        if let Some(d) = &self.displayurl {
            representable("displayurl", d)?;
            if d.is_empty() {
                return Err(err("displayurl", "is empty".into()));
            }
        }
        if let Some(rank) = self.pagerank {
            if !kind.carries_content() {
                return Err(not_allowed("pagerank", "applies to content feeds only"));
            }
            if !(68..=100).contains(&rank) {
                return Err(err("pagerank", format!("{rank} is outside 68 to 100")));
            }
        }
        let mut legacy_acl = Vec::new();
        if let Some(acl) = &self.acl {
            acl.check().map_err(|m| err("acl", m))?;
            if opts.acl_format == AclFormat::Legacy {
                legacy_acl = acl.legacy_metadata().map_err(|m| err("acl", m))?;
            }
        }
        if let Some(action @ (Action::Update | Action::DeletePattern)) = self.action {
            let name = if action == Action::Update {
                "update"
            } else {
                "delete-pattern"
            };
            return Err(Error::refused(
                RecordErrorKind::NotAllowed,
                index,
                Some("action"),
                format!("'{name}' exists only in Thunderstone feeds (--format thunderstone)"),
            ));
        }
        let delete = self.action == Some(Action::Delete);
        if let Some(content) = &self.content {
            let field = content.field();
            if !kind.carries_content() {
                let why = if kind.web {
                    "the 'web' datasource is a web feed: it carries URLs, not content"
                } else {
                    "a metadata-and-url feed carries URLs and metadata, not content"
                };
                return Err(not_allowed(field, why));
            }
            if delete {
                return Err(not_allowed(field, "a delete record carries no content"));
            }
        } else if kind.feedtype == FeedType::Full
            && !delete
            && (!self.metadata.is_empty() || !legacy_acl.is_empty())
            && !kind.web
        {
            return Err(err(
                "metadata",
                "a full feed cannot push metadata alone (legacy ACLs are metadata too): give the \
                 record content too"
                    .into(),
            ));
        }
        for (name, value) in &self.metadata {
            if name.is_empty() {
                return Err(err("metadata", "a metadata name is empty".into()));
            }
            if value.is_empty() {
                return Err(err(
                    "metadata",
                    format!(
                        "'{name}' has an empty value, which makes the appliance reject the record"
                    ),
                ));
            }
        }
        let mimetype = self.mimetype(index)?;
        let last_modified = match &self.last_modified {
            Some(ts) => {
                let date = normalize_date(ts).map_err(|m| err("last_modified", m))?;
                representable("last_modified", &date)?;
                Some(date)
            }
            None => None,
        };
        // Sorted so that unchanged documents give the same bytes; stable, so that repeated names
        // keep their input order.
        let metadata: Cow<'_, [(String, String)]> =
            if legacy_acl.is_empty() && self.metadata.is_sorted_by(|a, b| a.0 <= b.0) {
                Cow::Borrowed(&self.metadata)
            } else {
                let mut sorted = self.metadata.clone();
                sorted.append(&mut legacy_acl);
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                Cow::Owned(sorted)
            };
        Ok(Checked {
            record: self,
            mimetype,
            last_modified,
            metadata,
        })
    }

    /// Checks the record and appends its XML form to `out`.
    pub fn encode_into(
        &self,
        index: usize,
        kind: FeedKind,
        opts: EncodeOptions,
        scratch: &mut Scratch,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if self.standalone_acl {
            return self.encode_standalone_acl(index, opts, out);
        }
        let checked = self.check(index, kind, opts)?;
        let written = checked.write(index, opts, scratch, out);
        scratch.trim();
        written
    }
}

fn attr(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    escape_into(out, value, Context::Attribute).expect("checked as representable");
    out.push(b'"');
}

fn flag(out: &mut Vec<u8>, name: &str, value: Option<bool>) {
    if let Some(v) = value {
        attr(out, name, if v { "true" } else { "false" });
    }
}

impl Checked<'_, '_> {
    fn write(
        &self,
        index: usize,
        opts: EncodeOptions,
        scratch: &mut Scratch,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let r = self.record;
        out.extend_from_slice(b"<record");
        attr(out, "url", &r.url);
        if let Some(d) = &r.displayurl {
            attr(out, "displayurl", d);
        }
        match r.action {
            Some(Action::Add) => attr(out, "action", "add"),
            Some(Action::Delete) => attr(out, "action", "delete"),
            _ => {}
        }
        attr(out, "mimetype", self.mimetype);
        if let Some(date) = &self.last_modified {
            attr(out, "last-modified", date);
        }
        flag(out, "lock", r.lock);
        if let Some(m) = r.authmethod {
            attr(out, "authmethod", m.as_str());
        }
        if let Some(rank) = r.pagerank {
            attr(out, "pagerank", &rank.to_string());
        }
        flag(out, "crawl-immediately", r.crawl_immediately);
        flag(out, "crawl-once", r.crawl_once);
        let acl = r
            .acl
            .as_ref()
            .filter(|_| opts.acl_format == AclFormat::PerUrl);
        let metadata = !self.metadata.is_empty() || r.overwrite_acls.is_some();
        if acl.is_none() && !metadata && r.content.is_none() {
            out.extend_from_slice(b"/>\n");
            return Ok(());
        }
        out.extend_from_slice(b">\n");
        // The DTD's order: acl, metadata, content.
        if let Some(acl) = acl {
            acl.write(out, None);
        }
        if metadata {
            out.extend_from_slice(b"<metadata");
            flag(out, "overwrite-acls", r.overwrite_acls);
            out.extend_from_slice(b">\n");
            for (name, value) in self.metadata.iter() {
                write_meta(out, name, value);
            }
            out.extend_from_slice(b"</metadata>\n");
        }
        if let Some(content) = &r.content {
            self.write_content(index, content, opts, scratch, out)?;
        }
        out.extend_from_slice(b"</record>\n");
        Ok(())
    }

    fn write_content(
        &self,
        index: usize,
        content: &Content<'_>,
        opts: EncodeOptions,
        scratch: &mut Scratch,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let Scratch {
            deflater,
            bytes: buf,
        } = scratch;
        let (bytes, text) = content.resolve(index, self.mimetype, buf)?;
        if let Some(s) = text {
            // Text is deflated too when that makes it smaller, base64 included: smaller feeds
            // are quicker to write, push and process. Short text stays readable.
            let deflate = match opts.compress {
                Compress::Never => false,
                Compress::Always => true,
                Compress::Auto => s.len() >= MIN_TEXT_DEFLATE,
            };
            if deflate {
                // No entropy probe: text is never noise to deflate, and the size check below
                // catches the text that does not shrink.
                let payload = deflater.deflated(bytes);
                let smaller = payload.len().div_ceil(3) * 4 < s.len();
                if smaller || opts.compress == Compress::Always {
                    write_encoded(out, Encoding::Base64Compressed, payload);
                    return Ok(());
                }
            }
            let mark = out.len();
            out.reserve(s.len() + s.len() / 8 + 32);
            out.extend_from_slice(b"<content>");
            if escape_into(out, s, Context::Text).is_ok() {
                out.extend_from_slice(b"</content>\n");
                return Ok(());
            }
            // XML cannot carry this text as text: base64 keeps every byte.
            out.truncate(mark);
        }
        let (encoding, payload) = deflater.choose(bytes, opts.compress);
        write_encoded(out, encoding, payload);
        Ok(())
    }
}

/// Text shorter than this stays text under `Compress::Auto`: a zlib header and base64 eat most
/// of what deflating it would save, and it stays readable.
const MIN_TEXT_DEFLATE: usize = 2048;

fn write_encoded(out: &mut Vec<u8>, encoding: Encoding, payload: &[u8]) {
    out.reserve(payload.len() / 3 * 4 + 64);
    out.extend_from_slice(b"<content encoding=\"");
    out.extend_from_slice(encoding.as_str().as_bytes());
    out.extend_from_slice(b"\">");
    base64_into(out, payload);
    out.extend_from_slice(b"</content>\n");
}

fn write_meta(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(b"<meta");
    if first_unrepresentable(name).is_none() && first_unrepresentable(value).is_none() {
        attr(out, "name", name);
        attr(out, "content", value);
    } else {
        // The protocol requires both name and content encoded when either is.
        out.extend_from_slice(b" encoding=\"base64binary\" name=\"");
        base64_into(out, name.as_bytes());
        out.extend_from_slice(b"\" content=\"");
        base64_into(out, value.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"/>\n");
}
