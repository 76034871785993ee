//! What a set is: its kind, its options, its manifest entries.

use crate::encode::{Compress, Scratch};
use crate::error::{Error, Result};
use crate::escape::{escape_into, Context};
use crate::groups;
use crate::jsonl;
use crate::record::{AclFormat, EncodeOptions, FeedKind, FeedType, Record};
use crate::thunderstone;

use super::{DEFAULT_LEVEL, DEFAULT_MAX_BYTES};

#[derive(Clone, Debug)]
pub struct Options {
    pub max_bytes: u64,
    /// 0 means no limit.
    pub max_records: u64,
    pub compress: Compress,
    pub level: u8,
    /// Encoding threads; 0 means one per core.
    pub workers: usize,
    pub acl_format: AclFormat,
    /// Whether a full set with no records is written (its one empty file deletes every
    /// document of the source when pushed) rather than refused when finished.
    pub allow_empty_full: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_bytes: DEFAULT_MAX_BYTES,
            max_records: 0,
            compress: Compress::Auto,
            level: DEFAULT_LEVEL,
            workers: 0,
            acl_format: AclFormat::PerUrl,
            allow_empty_full: false,
        }
    }
}

/// What a set of files holds, which decides their form, their names and where they are pushed.
/// Each kind is described once, in its `Form`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// gsafeed files, for /xmlfeed.
    Feed,
    /// Groups feeds, for /xmlgroups; the set's source is the groupsource.
    Groups,
    /// Thunderstone `recvdata.xml` data; the set's source is the profile.
    Thunderstone,
}

/// Parses a line of JSON Lines (`index` names it in errors) and appends its encoding.
type EncodeLine =
    fn(usize, &[u8], FeedKind, EncodeOptions, &mut Scratch, &mut Vec<u8>) -> Result<()>;
/// Appends the encoding of the record at `index`.
pub(super) type EncodeRecord =
    fn(usize, &Record<'_>, FeedKind, EncodeOptions, &mut Scratch, &mut Vec<u8>) -> Result<()>;

/// Everything that differs from one kind of set to another.
pub(super) struct Form {
    /// Its name, in the manifest and in `FeedWriter(kind=...)`.
    name: &'static str,
    /// What its source is called (the datasource of a feed).
    source: &'static str,
    /// Between the source and the number, in its files' names.
    infix: &'static str,
    /// What opens a file of a feed type, for a source.
    header: fn(&str, FeedType) -> Vec<u8>,
    /// What closes a file.
    footer: &'static [u8],
    /// The feed type a set for a source is, asked for one: it, another, or why not.
    feedtype: fn(&str, FeedType) -> Result<FeedType>,
    /// Whether the `web` source makes it a web feed (URLs only, see `FeedKind`).
    web: bool,
    /// Whether an empty full set still gets its one (empty) file: pushing it deletes the
    /// source's documents, which is what it means.
    empty_full_file: bool,
    encode_line: EncodeLine,
    /// None if it takes no document records.
    pub(super) encode_record: Option<EncodeRecord>,
    /// Whether it takes group memberships.
    pub(super) memberships: bool,
}

const XML_DECLARATION: &[u8] = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

const FEED: Form = Form {
    name: "feed",
    source: "datasource",
    infix: "",
    header: |source, feedtype| {
        let mut h = Vec::with_capacity(256);
        h.extend_from_slice(XML_DECLARATION);
        h.extend_from_slice(
            b"<!DOCTYPE gsafeed PUBLIC \"-//Google//DTD GSA Feeds//EN\" \"\">\n\
              <gsafeed>\n<header>\n<datasource>",
        );
        escape_into(&mut h, source, Context::Text).expect("datasource names are ASCII");
        h.extend_from_slice(b"</datasource>\n<feedtype>");
        h.extend_from_slice(feedtype.as_str().as_bytes());
        h.extend_from_slice(b"</feedtype>\n</header>\n<group>\n");
        h
    },
    footer: b"</group>\n</gsafeed>\n",
    feedtype: |source, feedtype| {
        if source == "web" && feedtype == FeedType::Full {
            return Err(Error::Config(
                "the 'web' datasource is a web feed, which is always incremental: use \
                 --feedtype incremental or metadata-and-url"
                    .into(),
            ));
        }
        Ok(feedtype)
    },
    web: true,
    empty_full_file: true,
    encode_line: |index, line, kind, enc, scratch, out| {
        jsonl::parse_line(index, line)?.encode_into(index, kind, enc, scratch, out)
    },
    encode_record: Some(|index, record, kind, enc, scratch, out| {
        record.encode_into(index, kind, enc, scratch, out)
    }),
    memberships: false,
};

const GROUPS: Form = Form {
    name: "groups",
    source: "groupsource",
    infix: "-groups",
    // The groupsource and feed type travel in the POST, as with feeds.
    header: |_, _| [XML_DECLARATION, b"<xmlgroups>\n"].concat(),
    footer: b"</xmlgroups>\n",
    feedtype: |_, feedtype| match feedtype {
        FeedType::MetadataAndUrl => {
            Err(Error::Config("a groups feed is full or incremental".into()))
        }
        _ => Ok(feedtype),
    },
    web: false,
    // `xmlgroups (membership+)`: no empty form.
    empty_full_file: false,
    encode_line: |index, line, _, _, _, out| {
        groups::parse_line(index, line)?.encode_into(index, out)
    },
    encode_record: None,
    memberships: true,
};

const THUNDERSTONE: Form = Form {
    name: "thunderstone",
    source: "profile",
    infix: "-thunderstone",
    header: |_, _| thunderstone::HEADER.to_vec(),
    footer: thunderstone::FOOTER,
    // There is no feed type: the manifest says incremental.
    feedtype: |_, _| Ok(FeedType::Incremental),
    web: false,
    empty_full_file: true,
    encode_line: |index, line, _, _, scratch, out| {
        thunderstone::encode_item(&jsonl::parse_line(index, line)?, index, scratch, out)
    },
    encode_record: Some(|index, record, _, _, scratch, out| {
        thunderstone::encode_item(record, index, scratch, out)
    }),
    memberships: false,
};

impl SetKind {
    const ALL: [SetKind; 3] = [SetKind::Feed, SetKind::Groups, SetKind::Thunderstone];

    /// What it is.
    pub(super) fn form(self) -> &'static Form {
        match self {
            SetKind::Feed => &FEED,
            SetKind::Groups => &GROUPS,
            SetKind::Thunderstone => &THUNDERSTONE,
        }
    }

    /// The kind named `name` (as `as_str` names it); the error names them all.
    pub fn parse(name: &str) -> Result<Self> {
        let names: Vec<_> = Self::ALL.iter().map(|k| k.as_str()).collect();
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| {
                Error::Config(format!(
                    "kind '{name}' is not {} or {}",
                    names[..names.len() - 1].join(", "),
                    names[names.len() - 1]
                ))
            })
    }

    pub fn as_str(self) -> &'static str {
        self.form().name
    }

    /// The name of file `seq` (from 1) of a set for `source`.
    pub fn file_name(self, source: &str, seq: usize) -> String {
        format!("{source}{}-{seq:06}.xml", self.form().infix)
    }

    /// What opens a file of `feedtype` for `source`, before its records.
    pub fn header(self, source: &str, feedtype: FeedType) -> Vec<u8> {
        (self.form().header)(source, feedtype)
    }

    /// What closes a file.
    pub fn footer(self) -> &'static [u8] {
        self.form().footer
    }

    /// Checks a set's `source` name, and the feed type asked for it; returns how its records
    /// are encoded.
    pub(super) fn feed_kind(self, source: &str, feedtype: FeedType) -> Result<FeedKind> {
        let form = self.form();
        check_name(form.source, source)?;
        Ok(FeedKind {
            feedtype: (form.feedtype)(source, feedtype)?,
            web: form.web && source == "web",
        })
    }

    /// Whether an empty full set still gets its one (empty) file.
    pub(super) fn empty_full_file(self) -> bool {
        self.form().empty_full_file
    }

    /// Why a set of `feedtype` for `source` is refused if it is finished with no records, if
    /// it is: a full one would empty the source on the appliance, which an empty input far
    /// more often means by mistake (a broken export), so it takes `allowed`; a full one with
    /// no empty form is refused whatever is allowed.
    pub(super) fn refuse_empty(
        self,
        source: &str,
        feedtype: FeedType,
        allowed: bool,
    ) -> Option<String> {
        if feedtype != FeedType::Full || (allowed && self.empty_full_file()) {
            return None;
        }
        Some(if self.empty_full_file() {
            format!(
                "a full feed with no records would remove every document of '{source}'; nothing \
                 was written. If that is what you want, build it with --allow-empty-full \
                 (Python: allow_empty_full=True)"
            )
        } else {
            "a full groups feed needs at least one membership (the groups DTD has no empty \
             feed); nothing was written. Is the input the export you meant?"
                .into()
        })
    }

    /// Parses a line of JSON Lines (`index` names it in errors) and appends its encoding.
    pub(super) fn encode_line(
        self,
        index: usize,
        line: &[u8],
        kind: FeedKind,
        enc: EncodeOptions,
        scratch: &mut Scratch,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        (self.form().encode_line)(index, line, kind, enc, scratch, out)
    }
}

/// One finished feed file, as listed in the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestEntry {
    pub file: String,
    /// The datasource, or the groupsource of a groups feed.
    pub datasource: String,
    pub feedtype: FeedType,
    pub records: u64,
    pub bytes: u64,
    /// The file's digest, named by its algorithm: `xxh3:` and the hash in hex (`file_digest`).
    pub digest: String,
    pub kind: SetKind,
}

/// A feed file's digest in its manifest entry: XXH3-128, hashed as the file is written, in
/// the canonical form `xxhsum -H2` prints. It guards against accidental corruption (a file
/// changed or cut short between build and push) and ties a file to its journal entry; nothing
/// trusts it against a forger, so a non-cryptographic hash serves: BLAKE3, which manifests
/// carried before (still checked at push, as SHA-256 before it), took a tenth of a build's CPU
/// writing 1 KB records from Arrow.
pub(super) fn file_digest(hash: &u128) -> String {
    format!("xxh3:{hash:032x}")
}

impl ManifestEntry {
    pub(super) fn to_json(&self) -> String {
        // Every field is plain ASCII by construction (file names derive from the datasource).
        format!(
            "{{\"file\":\"{}\",\"datasource\":\"{}\",\"feedtype\":\"{}\",\"records\":{},\"bytes\":{},\"digest\":\"{}\",\"kind\":\"{}\"}}\n",
            self.file,
            self.datasource,
            self.feedtype.as_str(),
            self.records,
            self.bytes,
            self.digest,
            self.kind.as_str()
        )
    }
}

/// What a batch did besides writing records.
#[derive(Debug, Default)]
pub struct BatchReport {
    /// Warnings about records, by index, in their order: one that went alone into a file over
    /// the cap, a crawl flag without effect in a content feed.
    pub warnings: Vec<(usize, String)>,
    /// Files finished while writing this batch, in manifest order.
    pub finished: Vec<ManifestEntry>,
    /// Lines in a JSON Lines chunk, blank ones included (for numbering the next chunk's).
    pub lines: usize,
}

/// The datasource names the protocol allows: `[a-zA-Z_][a-zA-Z0-9_-]*`.
pub fn check_datasource(name: &str) -> Result<()> {
    check_name("datasource", name)
}

/// A source name (`what`: datasource, groupsource, profile), as the protocol allows them.
fn check_name(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{what} '{name}' is not allowed: it must start with a letter or underscore and \
             hold only letters, digits, '_' and '-'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_found_by_its_name_and_its_files_are_named_apart() {
        for kind in SetKind::ALL {
            assert_eq!(SetKind::parse(kind.as_str()).unwrap(), kind);
        }
        let names: Vec<_> = SetKind::ALL.map(|k| k.file_name("ds", 1)).into();
        assert_eq!(
            names,
            [
                "ds-000001.xml",
                "ds-groups-000001.xml",
                "ds-thunderstone-000001.xml"
            ]
        );
        assert_eq!(
            SetKind::parse("group").unwrap_err().to_string(),
            "kind 'group' is not feed, groups or thunderstone"
        );
    }
}
