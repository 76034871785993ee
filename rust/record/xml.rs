//! A checked record's XML form in a gsafeed.

use std::borrow::Cow;

use crate::encode::{base64_into, Compress, Encoding, Scratch};
use crate::error::Result;
use crate::escape::{attr, escape_into, first_unrepresentable, Context};

use super::{AclFormat, Action, Content, EncodeOptions, Record};

/// A record checked against its feed, ready to be written.
pub(super) struct Checked<'r, 'a> {
    pub(super) record: &'r Record<'a>,
    pub(super) mimetype: &'r str,
    pub(super) last_modified: Option<String>,
    /// Sorted by name, repeated names in input order: the input's own when it already is.
    pub(super) metadata: Cow<'r, [(String, String)]>,
}

fn flag(out: &mut Vec<u8>, name: &str, value: Option<bool>) {
    if let Some(v) = value {
        attr(out, name, if v { "true" } else { "false" });
    }
}

impl Checked<'_, '_> {
    pub(super) fn write(
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
            opened,
        } = scratch;
        let (bytes, text) = content.resolve(index, self.mimetype, buf, opened.take())?;
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
        match deflater.deflate_if_worth(bytes, opts.compress) {
            Some(n) => {
                Scratch::release_bytes(buf);
                write_encoded(out, Encoding::Base64Compressed, deflater.deflated_len(n));
            }
            None => write_encoded(out, Encoding::Base64Binary, bytes),
        }
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
