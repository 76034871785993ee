//! A feed record: the JSON Lines schema and its protocol rules (here), its content (`content`),
//! its dates (`date`) and its XML form (`xml`).

mod content;
mod date;
mod xml;

use std::borrow::Cow;

use crate::acl::{is_legacy_acl_name, Acl};
use crate::encode::{Compress, Scratch};
use crate::error::{Error, RecordErrorKind, Result};
use crate::escape::first_unrepresentable;
use crate::url::{check_in_full, plainly_valid, url_path};

pub use content::Content;
pub(crate) use content::{open_file_limit, read_ahead, OpenedFile, Source, Utf8Blocks};
use date::normalize_date;
pub(crate) use date::parse_date;
use xml::Checked;

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

/// `last_modified` before it is checked: a string, or seconds since the epoch.
#[derive(Clone, Debug)]
pub enum Timestamp {
    Text(String),
    Epoch(f64),
}

/// A metadata name and one of its values.
pub type MetaPair<'a> = (Cow<'a, str>, Cow<'a, str>);

/// A record; its URL, metadata and content may be borrowed from where it was read (Arrow
/// buffers, a chunk of JSON Lines).
#[derive(Clone, Debug, Default)]
pub struct Record<'a> {
    pub url: Cow<'a, str>,
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
    pub metadata: Vec<MetaPair<'a>>,
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

    /// The guide's table of feed types: an incremental feed of the `web` datasource allows no
    /// metadata (the appliance ignores it); a metadata-and-url feed and content feeds do.
    fn takes_metadata(self) -> bool {
        !self.web || self.feedtype == FeedType::MetadataAndUrl
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

fn guess_mimetype(path: &str) -> Option<&'static str> {
    // A path without a dot has no extension: most record URLs, asked for every record.
    if !path.contains('.') {
        return None;
    }
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
        // A URL of the usual form is printable ASCII, which XML carries: only the others are
        // scanned for what it cannot (a scan a record, all but the escaping's, for 1 KB records).
        if plainly_valid(&self.url) {
            return Ok(());
        }
        representable(index, "url", &self.url)?;
        check_in_full(&self.url).map_err(err)
    }

    /// The names of the fields this record gives besides `url`, in the record schema's order
    /// (`kind` for a standalone ACL): what a receiver or a kind of record has no place for is
    /// found among them, and refused by name.
    pub fn given_fields(&self) -> impl Iterator<Item = &'static str> {
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
            ("acl", self.acl.is_some()),
            ("overwrite_acls", self.overwrite_acls.is_some()),
            ("kind", self.standalone_acl),
        ]
        .into_iter()
        .filter_map(|(field, given)| given.then_some(field))
    }

    /// A warning about a crawl flag set in a content feed, naming it: the guide's
    /// `crawl-immediately` is for web and metadata-and-url feeds only, and "has no effect on
    /// content feeds", whose URLs the appliance does not crawl (`crawl-once` alike). Written as
    /// given all the same: the DTD allows both on any record, and `false` is their default.
    fn crawl_flag_without_effect(&self, kind: FeedKind) -> Option<String> {
        if !kind.carries_content() {
            return None;
        }
        let set: Vec<&str> = [
            ("crawl_immediately", self.crawl_immediately),
            ("crawl_once", self.crawl_once),
        ]
        .into_iter()
        .filter_map(|(field, given)| (given == Some(true)).then_some(field))
        .collect();
        (!set.is_empty()).then(|| {
            format!(
                "{}: true has no effect on content feeds, whose URLs the appliance does not \
                 crawl (it is for web and metadata-and-url feeds); written as given",
                set.join(" and ")
            )
        })
    }

    /// The first field a standalone ACL must not carry, if any.
    fn field_besides_acl(&self) -> Option<&'static str> {
        self.given_fields()
            .find(|field| !matches!(*field, "acl" | "kind"))
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
        let mut legacy_acl: Vec<(String, String)> = Vec::new();
        if let Some(acl) = &self.acl {
            acl.check().map_err(|m| err("acl", m))?;
            // The guide: "A per-URL ACL can be defined either in the metadata portion of the
            // feed, or in the document itself, but not in both places" (in the legacy format,
            // the two would merge into an ACL neither gave).
            if let Some((name, _)) = self.metadata.iter().find(|(n, _)| is_legacy_acl_name(n)) {
                return Err(not_allowed(
                    "metadata",
                    &format!(
                        "'{name}' gives the record a legacy ACL and acl gives it one too: a \
                         record's ACL goes in one place only (put its principals in acl)"
                    ),
                ));
            }
            if opts.acl_format == AclFormat::Legacy {
                legacy_acl = acl.legacy_metadata().map_err(|m| err("acl", m))?;
            }
        }
        if !kind.takes_metadata() {
            let why = "an incremental feed of the 'web' datasource takes none (the appliance \
                       ignores it): push it in a metadata-and-url feed, or under a datasource of \
                       its own (a content feed)";
            if !self.metadata.is_empty() {
                return Err(not_allowed("metadata", why));
            }
            if !legacy_acl.is_empty() {
                return Err(not_allowed(
                    "acl",
                    "the legacy ACL format writes metadata, which an incremental feed of the \
                     'web' datasource does not take (the appliance ignores it): use \
                     --acl-format per-url or a metadata-and-url feed",
                ));
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
            Some(ts) => Some(normalize_date(ts).map_err(|m| err("last_modified", m))?),
            None => None,
        };
        // Sorted so that unchanged documents give the same bytes; stable, so that repeated names
        // keep their input order.
        let metadata: Cow<'_, [MetaPair<'a>]> =
            if legacy_acl.is_empty() && self.metadata.is_sorted_by(|a, b| a.0 <= b.0) {
                Cow::Borrowed(&self.metadata)
            } else {
                let mut sorted = self.metadata.clone();
                sorted.extend(
                    legacy_acl
                        .into_iter()
                        .map(|(name, value)| (Cow::Owned(name), Cow::Owned(value))),
                );
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
        written?;
        scratch.warning = self.crawl_flag_without_effect(kind);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Access, Principal, Scope};

    fn kind(feedtype: FeedType, web: bool) -> FeedKind {
        FeedKind { feedtype, web }
    }

    const INCREMENTAL: FeedKind = FeedKind {
        feedtype: FeedType::Incremental,
        web: false,
    };

    fn encode(
        record: &Record<'_>,
        kind: FeedKind,
        acl_format: AclFormat,
    ) -> std::result::Result<String, (Option<&'static str>, RecordErrorKind, String)> {
        let opts = EncodeOptions {
            compress: Compress::Never,
            acl_format,
        };
        let mut out = Vec::new();
        match record.encode_into(3, kind, opts, &mut Scratch::new(1), &mut out) {
            Ok(()) => Ok(String::from_utf8(out).unwrap()),
            Err(Error::Record {
                index: 3,
                field,
                kind,
                message,
                ..
            }) => Err((field, kind, message)),
            Err(other) => panic!("{other:?}"),
        }
    }

    fn page() -> Record<'static> {
        Record {
            url: "http://docs.example.com/a".into(),
            ..Default::default()
        }
    }

    fn acl() -> Acl {
        Acl {
            principals: vec![Principal {
                name: "ann".into(),
                scope: Scope::User,
                access: Some(Access::Permit),
                namespace: None,
                case_sensitive: None,
                unqualified: false,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn crawl_flags_are_written_in_every_feed_with_a_warning_in_content_feeds() {
        // The guide: crawl-immediately "has no effect on content feeds" (not an error), and the
        // DTD allows both flags on any record. Pagerank stays refused outside content feeds.
        let opts = EncodeOptions {
            compress: Compress::Never,
            acl_format: AclFormat::PerUrl,
        };
        for (feedtype, web) in [
            (FeedType::Full, false),
            (FeedType::Incremental, false),
            (FeedType::Incremental, true),
            (FeedType::MetadataAndUrl, false),
            (FeedType::MetadataAndUrl, true),
        ] {
            let content = !web && feedtype != FeedType::MetadataAndUrl;
            let given = [
                (
                    Some(true),
                    None,
                    "crawl-immediately=\"true\"",
                    "crawl_immediately",
                ),
                (None, Some(true), "crawl-once=\"true\"", "crawl_once"),
                (Some(false), Some(false), "crawl-once=\"false\"", ""),
            ];
            for (crawl_immediately, crawl_once, written, warned) in given {
                let record = Record {
                    crawl_immediately,
                    crawl_once,
                    ..page()
                };
                let (mut scratch, mut out) = (Scratch::new(1), Vec::new());
                record
                    .encode_into(3, kind(feedtype, web), opts, &mut scratch, &mut out)
                    .unwrap();
                let xml = String::from_utf8(out).unwrap();
                assert!(xml.contains(written), "{xml}");
                match scratch.warning {
                    Some(warning) => {
                        assert!(content && !warned.is_empty(), "{feedtype:?}: {warning}");
                        let said = format!("{warned}: true has no effect on content feeds");
                        assert!(warning.starts_with(&said), "{warning}");
                    }
                    None => assert!(!content || warned.is_empty(), "{feedtype:?} {warned}"),
                }
            }
            let ranked = Record {
                pagerank: Some(90),
                ..page()
            };
            match encode(&ranked, kind(feedtype, web), AclFormat::PerUrl) {
                Ok(xml) => assert!(content && xml.contains("pagerank=\"90\""), "{xml}"),
                Err((field, k, message)) => {
                    assert!(!content, "{message}");
                    assert_eq!((field, k), (Some("pagerank"), RecordErrorKind::NotAllowed));
                    assert!(message.contains("content feeds only"), "{message}");
                }
            }
        }
    }

    #[test]
    fn metadata_in_an_incremental_web_feed_is_refused_and_kept_in_metadata_and_url() {
        let record = Record {
            metadata: vec![("k".into(), "v".into())],
            ..page()
        };
        let (field, k, message) = encode(
            &record,
            kind(FeedType::Incremental, true),
            AclFormat::PerUrl,
        )
        .unwrap_err();
        assert_eq!((field, k), (Some("metadata"), RecordErrorKind::NotAllowed));
        assert!(message.contains("metadata-and-url feed"), "{message}");
        let xml = encode(
            &record,
            kind(FeedType::MetadataAndUrl, true),
            AclFormat::PerUrl,
        );
        assert!(xml.unwrap().contains("<meta name=\"k\" content=\"v\"/>"));
        // A legacy ACL is metadata too; a per-URL one is not.
        let with_acl = Record {
            acl: Some(acl()),
            ..page()
        };
        let (field, ..) = encode(
            &with_acl,
            kind(FeedType::Incremental, true),
            AclFormat::Legacy,
        )
        .unwrap_err();
        assert_eq!(field, Some("acl"));
        let xml = encode(
            &with_acl,
            kind(FeedType::Incremental, true),
            AclFormat::PerUrl,
        );
        assert!(xml.unwrap().contains("<acl>"));
    }

    #[test]
    fn an_acl_given_also_as_legacy_metadata_is_refused_in_either_format() {
        for name in ["google:aclusers", "google:aclinheritfrom"] {
            let record = Record {
                acl: Some(acl()),
                metadata: vec![(name.into(), "joe".into())],
                content: Some(Content::Text("x".into())),
                ..page()
            };
            for format in [AclFormat::PerUrl, AclFormat::Legacy] {
                let (field, k, message) = encode(&record, INCREMENTAL, format).unwrap_err();
                assert_eq!((field, k), (Some("metadata"), RecordErrorKind::NotAllowed));
                assert!(
                    message.contains(&format!("'{name}'")) && message.contains("acl gives"),
                    "{message}"
                );
            }
        }
        // Names as `fastfeed validate` reads them: exact, so another case is plain metadata.
        let record = Record {
            acl: Some(acl()),
            metadata: vec![("Google:ACLusers".into(), "joe".into())],
            ..page()
        };
        assert!(encode(&record, INCREMENTAL, AclFormat::PerUrl).is_ok());
        // Legacy metadata without an acl is the user's own legacy ACL.
        let record = Record {
            metadata: vec![("google:aclusers".into(), "joe".into())],
            ..page()
        };
        assert!(encode(&record, INCREMENTAL, AclFormat::PerUrl).is_ok());
    }

    #[test]
    fn overwrite_acls_writes_no_empty_metadata() {
        let alone = Record {
            overwrite_acls: Some(false),
            ..page()
        };
        let xml = encode(&alone, INCREMENTAL, AclFormat::PerUrl).unwrap();
        assert!(!xml.contains("<metadata"), "{xml}");
        let xml = encode(
            &Record {
                acl: Some(acl()),
                ..alone.clone()
            },
            INCREMENTAL,
            AclFormat::PerUrl,
        )
        .unwrap();
        assert!(xml.contains("<acl>") && !xml.contains("<metadata"), "{xml}");
        // With the metas it governs, it is written.
        let xml = encode(
            &Record {
                acl: Some(acl()),
                ..alone
            },
            INCREMENTAL,
            AclFormat::Legacy,
        )
        .unwrap();
        assert!(
            xml.contains("<metadata overwrite-acls=\"false\">\n<meta name=\"google:aclusers\""),
            "{xml}"
        );
    }

    #[test]
    fn a_leap_second_is_refused_naming_last_modified() {
        let record = Record {
            last_modified: Some(Timestamp::Text("Sat, 31 Dec 2016 23:59:60 GMT".into())),
            ..page()
        };
        let (field, k, message) = encode(&record, INCREMENTAL, AclFormat::PerUrl).unwrap_err();
        assert_eq!(
            (field, k),
            (Some("last_modified"), RecordErrorKind::Invalid)
        );
        assert!(message.contains("leap second"), "{message}");
    }
}
