//! What a set is: its kind, its options, its manifest entries.

use crate::encode::{Compress, Scratch};
use crate::error::{Error, Result};
use crate::escape::{escape_into, Context};
use crate::groups;
use crate::jsonl;
use crate::record::{AclFormat, EncodeOptions, FeedKind, FeedType};
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
        }
    }
}

/// What a set of files holds, which decides their form, their names and where they are pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// gsafeed files, for /xmlfeed.
    Feed,
    /// Groups feeds, for /xmlgroups; the set's source is the groupsource.
    Groups,
    /// Thunderstone `recvdata.xml` data; the set's source is the profile.
    Thunderstone,
}

const XML_DECLARATION: &[u8] = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

/// What differs from one kind of set to another, in one place: its name in the manifest, its
/// files' names, what opens and closes a file, and how a line of JSON Lines is encoded.
impl SetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::Feed => "feed",
            SetKind::Groups => "groups",
            SetKind::Thunderstone => "thunderstone",
        }
    }

    /// The name of file `seq` (from 1) of a set for `source`.
    pub fn file_name(self, source: &str, seq: usize) -> String {
        match self {
            SetKind::Feed => format!("{source}-{seq:06}.xml"),
            SetKind::Groups => format!("{source}-groups-{seq:06}.xml"),
            SetKind::Thunderstone => format!("{source}-thunderstone-{seq:06}.xml"),
        }
    }

    /// What opens a file of `feedtype` for `source`, before its records.
    pub fn header(self, source: &str, feedtype: FeedType) -> Vec<u8> {
        match self {
            SetKind::Feed => {
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
            }
            // The groupsource and feed type travel in the POST, as with feeds.
            SetKind::Groups => [XML_DECLARATION, b"<xmlgroups>\n"].concat(),
            SetKind::Thunderstone => thunderstone::HEADER.to_vec(),
        }
    }

    /// What closes a file.
    pub fn footer(self) -> &'static [u8] {
        match self {
            SetKind::Feed => b"</group>\n</gsafeed>\n",
            SetKind::Groups => b"</xmlgroups>\n",
            SetKind::Thunderstone => thunderstone::FOOTER,
        }
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
        match self {
            SetKind::Feed => {
                jsonl::parse_line(index, line)?.encode_into(index, kind, enc, scratch, out)
            }
            SetKind::Groups => groups::parse_line(index, line)?.encode_into(index, out),
            SetKind::Thunderstone => {
                thunderstone::encode_item(&jsonl::parse_line(index, line)?, index, scratch, out)
            }
        }
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
    pub sha256: String,
    pub kind: SetKind,
}

impl ManifestEntry {
    pub(super) fn to_json(&self) -> String {
        // Every field is plain ASCII by construction (file names derive from the datasource).
        format!(
            "{{\"file\":\"{}\",\"datasource\":\"{}\",\"feedtype\":\"{}\",\"records\":{},\"bytes\":{},\"sha256\":\"{}\",\"kind\":\"{}\"}}\n",
            self.file,
            self.datasource,
            self.feedtype.as_str(),
            self.records,
            self.bytes,
            self.sha256,
            self.kind.as_str()
        )
    }
}

/// What a batch did besides writing records.
#[derive(Debug, Default)]
pub struct BatchReport {
    /// Records that went alone into a file over the cap, with why.
    pub warnings: Vec<(usize, String)>,
    /// Files finished while writing this batch, in manifest order.
    pub finished: Vec<ManifestEntry>,
    /// Lines in a JSON Lines chunk, blank ones included (for numbering the next chunk's).
    pub lines: usize,
}

/// The datasource names the protocol allows: `[a-zA-Z_][a-zA-Z0-9_-]*`.
pub fn check_datasource(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "datasource '{name}' is not allowed: it must start with a letter or underscore and \
             hold only letters, digits, '_' and '-'"
        )))
    }
}
