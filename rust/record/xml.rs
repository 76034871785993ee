//! A checked record's XML form in a gsafeed.

use std::borrow::Cow;

use crate::encode::pieces::{self, Pieces};
use crate::encode::{
    base64_into, worth_deflating, Base64Stream, Compress, Deflater, Scratch, IN_BLOCK,
};
use crate::error::Result;
use crate::escape::{attr, attr_or_refuse, text_into};
use crate::spill::Sink;

use super::content::{Source, Utf8Blocks};
use super::{AclFormat, Action, EncodeOptions, MetaPair, Record};

/// A record checked against its feed, ready to be written.
pub(super) struct Checked<'r, 'a> {
    pub(super) record: &'r Record<'a>,
    pub(super) mimetype: &'r str,
    pub(super) last_modified: Option<String>,
    /// Sorted by name, repeated names in input order: the input's own when it already is.
    pub(super) metadata: Cow<'r, [MetaPair<'a>]>,
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
        let start = out.len();
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
        // No empty `<metadata>`: in an incremental feed it would replace the document's
        // metadata with none, and `overwrite-acls` governs only the legacy ACL in its metas.
        let metadata = !self.metadata.is_empty();
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
        let Some(content) = &r.content else {
            out.extend_from_slice(b"</record>\n");
            return Ok(());
        };
        // The content may be big: from here on the record may be moved out of memory.
        let Scratch {
            deflater,
            bytes,
            spill,
            opened,
            ..
        } = scratch;
        let mut sink = Sink::new(out, start, spill);
        let mut source = content.source(index, self.mimetype, bytes, opened.take())?;
        write_content(&mut source, opts.compress, deflater, &mut sink)?;
        if source.leaves_memory() {
            sink.move_out_whole()?;
        }
        sink.out.extend_from_slice(b"</record>\n");
        sink.finish()
    }
}

/// Writes a content's element in the form that suits it: text as XML text, deflated when that
/// makes it smaller (base64 included) and it is long enough; binary deflated when it is worth
/// trying (`worth_deflating`) and pays; anything XML cannot carry as text in base64. Each form
/// is written as it is made, and taken back when it does not pay: a file's bytes are read in
/// blocks, once for each form tried, and never held whole.
fn write_content(
    source: &mut Source<'_>,
    compress: Compress,
    deflater: &mut Deflater,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let len = source.len();
    let deflate_text = match compress {
        Compress::Never => false,
        Compress::Always => true,
        Compress::Auto => len >= MIN_TEXT_DEFLATE as u64,
    };
    // Judged from the first bytes, and only when needed: most text never needs it.
    let mut worth = None;
    let mut deflate_binary = |source: &mut Source<'_>| -> Result<bool> {
        if worth.is_none() {
            worth = Some(worth_deflating(source.head()?, len, compress));
        }
        Ok(worth == Some(true))
    };
    let mut text = source.is_text();
    // A file of a text type whose first block is not UTF-8 is no text: it is judged as binary
    // (by the entropy of its head), as in memory, and not deflated whole to learn it.
    if text.is_none() && !head_may_be_text(source)? {
        text = Some(false);
    }
    // A file of a text type is text if it is UTF-8, which is known once it is read: it is read
    // first for deflating when either way deflating comes first.
    let deflate_first = match text {
        Some(true) => deflate_text,
        Some(false) => deflate_binary(source)?,
        None => deflate_text || deflate_binary(source)?,
    };
    if !deflate_first && text == Some(false) {
        // Only base64 is left: a content too big for it is refused before it is written.
        source.fits(len.div_ceil(3) * 4)?;
    }
    // The deflated length, once known: a second try would only make it again.
    let mut deflated = None;
    if deflate_first {
        let mark = sink.len();
        let (n, is_text) = write_deflated(source, deflater, sink)?;
        deflated = Some(n);
        // No entropy probe for text: it is never noise to deflate, and the size check catches
        // the text that does not shrink.
        let keep = if is_text {
            deflate_text && (n.div_ceil(3) * 4 < len || compress == Compress::Always)
        } else {
            deflate_binary(source)? && compress.keeps(n, len)
        };
        if keep {
            return Ok(());
        }
        sink.truncate(mark)?;
        text = Some(is_text);
    }
    if text != Some(false) {
        let mark = sink.len();
        if write_text(source, sink)? {
            return Ok(());
        }
        // XML cannot carry this text as text (or it is not UTF-8): base64 keeps every byte.
        sink.truncate(mark)?;
        if deflate_binary(source)? && deflated.is_none_or(|n| compress.keeps(n, len)) {
            let (n, _) = write_deflated(source, deflater, sink)?;
            if compress.keeps(n, len) {
                return Ok(());
            }
            sink.truncate(mark)?;
        }
    }
    write_base64(source, sink)
}

/// Whether the first block of a content may be text: UTF-8, but for a character cut at its end.
fn head_may_be_text(source: &mut Source<'_>) -> Result<bool> {
    let head = source.head()?;
    Ok(Utf8Blocks::default().push(head, false, |_| Ok(())).is_ok())
}

/// Writes the content deflated (in pieces that an idle thread shares when it has more than a
/// block, see `encode::pieces`); returns the deflated length and whether the content is text
/// (for a file of a text type, learnt on the way).
fn write_deflated(
    source: &mut Source<'_>,
    deflater: &mut Deflater,
    sink: &mut Sink<'_>,
) -> Result<(u64, bool)> {
    sink.out
        .extend_from_slice(b"<content encoding=\"base64compressed\">");
    let mut base64 = Base64Stream::default();
    let text = if pieces::split(source.len()) {
        let mut write = |bytes: &[u8]| {
            base64.push(sink.out, bytes);
            sink.relieve()
        };
        let mut pieces = Pieces::new(deflater);
        let text = source.blocks_and_text(|block, last| pieces.push(block, last, &mut write))?;
        pieces.finish(&mut write)?;
        text
    } else {
        deflater.start();
        source.blocks_and_text(|block, last| {
            deflater.block(block, last, |piece| base64.push(sink.out, piece));
            sink.relieve()
        })?
    };
    let n = base64.finish(sink.out);
    sink.out.extend_from_slice(b"</content>\n");
    Ok((n, text))
}

/// Writes the content as XML text (escaped, or in CDATA sections where they are shorter); false
/// (the element partly written) if it is not UTF-8 or holds a character XML cannot carry.
///
/// Text goes to `text_into` in the pieces a file's blocks make, each closing its own sections,
/// from a file or from memory alike: where sections go depends on the pieces, and a file's
/// record is the record of its bytes in memory.
fn write_text(source: &mut Source<'_>, sink: &mut Sink<'_>) -> Result<bool> {
    sink.out.extend_from_slice(b"<content>");
    let escaped = match source {
        // A block or less: one piece, and no need to check it as UTF-8 again.
        Source::Memory {
            text: Some(text), ..
        } if text.len() <= IN_BLOCK => {
            sink.out.reserve(text.len() + text.len() / 8 + 32);
            text_into(sink.out, text).is_ok()
        }
        _ => {
            let mut utf8 = Utf8Blocks::default();
            let mut escaped = true;
            source.blocks(|block, last| {
                escaped = utf8
                    .push(block, last, |piece| {
                        text_into(sink.out, piece).map_err(drop)
                    })
                    .is_ok();
                sink.relieve()?;
                Ok(escaped)
            })?;
            escaped
        }
    };
    sink.out.extend_from_slice(b"</content>\n");
    sink.relieve()?;
    Ok(escaped)
}

/// Writes the content in plain base64.
fn write_base64(source: &mut Source<'_>, sink: &mut Sink<'_>) -> Result<()> {
    sink.out
        .extend_from_slice(b"<content encoding=\"base64binary\">");
    let mut base64 = Base64Stream::default();
    source.blocks(|block, _| {
        sink.out.reserve(block.len() / 3 * 4 + 64);
        base64.push(sink.out, block);
        sink.relieve()?;
        Ok(true)
    })?;
    base64.finish(sink.out);
    sink.out.extend_from_slice(b"</content>\n");
    Ok(())
}

/// Text shorter than this stays text under `Compress::Auto`: a zlib header and base64 eat most
/// of what deflating it would save, and it stays readable.
const MIN_TEXT_DEFLATE: usize = 2048;

fn write_meta(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(b"<meta");
    let start = out.len();
    // What XML cannot carry is found by the escaping, not by a scan of each before it.
    let escaped = attr_or_refuse(out, "name", name)
        .and_then(|()| attr_or_refuse(out, "content", value))
        .is_ok();
    if !escaped {
        out.truncate(start);
        // The protocol requires both name and content encoded when either is.
        out.extend_from_slice(b" encoding=\"base64binary\" name=\"");
        base64_into(out, name.as_bytes());
        out.extend_from_slice(b"\" content=\"");
        base64_into(out, value.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"/>\n");
}
