//! Binary encodings of the protocol: `base64binary` and `base64compressed` (zlib, then base64).

use base64_simd::STANDARD;
use libdeflater::{CompressionLvl, Compressor};

use crate::record::OpenedFile;

/// How content may be compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compress {
    /// Compress content that will shrink: binary, and text of 2 KB or more (shorter text is
    /// sent as text).
    Auto,
    /// Compress every content, text included.
    Always,
    /// Never compress: binary goes as plain base64.
    Never,
}

impl Compress {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Compress::Auto),
            "always" => Some(Compress::Always),
            "never" => Some(Compress::Never),
            _ => None,
        }
    }
}

/// The `encoding` attribute chosen for a content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Base64Binary,
    Base64Compressed,
}

impl Encoding {
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Base64Binary => "base64binary",
            Encoding::Base64Compressed => "base64compressed",
        }
    }
}

/// Appends standard base64 (with padding) of `data` to `out`, straight into its spare capacity:
/// zero-filling first would touch every page twice.
pub fn base64_into(out: &mut Vec<u8>, data: &[u8]) {
    let n = STANDARD.encoded_length(data.len());
    out.reserve(n);
    let written = STANDARD
        .encode(
            data,
            base64_simd::Out::from_uninit_slice(&mut out.spare_capacity_mut()[..n]),
        )
        .len();
    debug_assert_eq!(written, n);
    // SAFETY: `encode` initialised the first `written` bytes of the spare capacity.
    unsafe { out.set_len(out.len() + written) };
}

/// Decodes base64 given by a user into `out` (cleared first): standard alphabet, padding
/// optional, and line breaks or other ASCII whitespace ignored (encoders often wrap at 76).
pub fn decode_base64_into(text: &str, out: &mut Vec<u8>) -> Result<(), String> {
    // Most base64 has no whitespace: decode it as it is, and look for whitespace only when
    // that fails (a byte-by-byte scan first would cost more than the decoding).
    if decode_compact(text.as_bytes(), out).is_ok() {
        return Ok(());
    }
    if !text.bytes().any(|b| b.is_ascii_whitespace()) {
        return Err(base64_error(text.as_bytes()));
    }
    let compact: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    decode_compact(&compact, out).map_err(|()| base64_error(&compact))
}

/// Decodes base64 without whitespace, padded or not, into `out` (cleared first).
fn decode_compact(compact: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
    let engine = if compact.ends_with(b"=") {
        base64_simd::STANDARD
    } else {
        base64_simd::STANDARD_NO_PAD
    };
    out.clear();
    let n = engine.decoded_length(compact).map_err(|_| ())?;
    out.reserve(n);
    let done = engine
        .decode(
            compact,
            base64_simd::Out::from_uninit_slice(&mut out.spare_capacity_mut()[..n]),
        )
        .map_err(|_| ())?
        .len();
    // SAFETY: `decode` initialised the first `done` bytes of the spare capacity.
    unsafe { out.set_len(done) };
    Ok(())
}

/// Why `compact` (base64 without whitespace) does not decode.
fn base64_error(compact: &[u8]) -> String {
    let bad = compact
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='));
    match bad {
        Some(pos) => format!("not valid base64: unexpected character at offset {pos}"),
        None => format!(
            "not valid base64: {} characters cannot end a base64 text",
            compact.len()
        ),
    }
}

/// Formats that are already compressed: deflating them again costs time and saves nothing.
fn is_precompressed(data: &[u8]) -> bool {
    const MAGIC: &[&[u8]] = &[
        b"\x1f\x8b",           // gzip
        b"PK\x03\x04",         // zip, and the OOXML/ODF/JAR/EPUB formats built on it
        b"\x89PNG",            // png
        b"\xff\xd8\xff",       // jpeg
        b"GIF8",               // gif
        b"BZh",                // bzip2
        b"\xfd7zXZ\x00",       // xz
        b"7z\xbc\xaf\x27\x1c", // 7z
        b"\x28\xb5\x2f\xfd",   // zstd
        b"Rar!",               // rar
        b"OggS",               // ogg
        b"ID3",                // mp3
        b"\x1a\x45\xdf\xa3",   // matroska, webm
        b"wOFF",               // woff
        b"wOF2",               // woff2
    ];
    MAGIC.iter().any(|m| data.starts_with(m))
        || (data.len() > 12 && &data[4..8] == b"ftyp") // mp4, mov, heic
        || (data.len() > 12 && data.starts_with(b"RIFF") && &data[8..12] == b"WEBP")
}

/// Bytes from the start of a content whose entropy decides whether the whole is worth deflating.
const PROBE: usize = 16 * 1024;
/// Above this many bits per byte, data is noise to deflate (random, encrypted, compressed).
const INCOMPRESSIBLE_BITS: f64 = 7.8;

/// Shannon entropy of the byte histogram, in bits per byte (0 to 8). Counting is ~18x cheaper
/// than a trial deflate, which costs as much on noise as on anything else.
fn entropy(sample: &[u8]) -> f64 {
    // Four histograms break the store-to-load chain of equal neighbouring bytes.
    let mut counts = [[0u32; 256]; 4];
    let mut quads = sample.chunks_exact(4);
    for q in &mut quads {
        for (h, &b) in counts.iter_mut().zip(q) {
            h[usize::from(b)] += 1;
        }
    }
    for &b in quads.remainder() {
        counts[0][usize::from(b)] += 1;
    }
    let n = sample.len() as f64;
    (0..256)
        .map(|i| counts.iter().map(|h| h[i]).sum::<u32>())
        .filter(|&c| c > 0)
        .map(|c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}
/// Below this, compression headers and base64 rounding eat what compression saves.
const MIN_COMPRESS: usize = 128;

/// Deflates data with a reusable compressor (one per worker thread).
pub struct Deflater {
    level: u8,
    compressor: Compressor,
    scratch: Vec<u8>,
}

impl Deflater {
    pub fn new(level: u8) -> Self {
        let lvl = CompressionLvl::new(i32::from(level)).unwrap_or_default();
        Deflater {
            level,
            compressor: Compressor::new(lvl),
            scratch: Vec::new(),
        }
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    /// `data` zlib-deflated, in the scratch buffer.
    pub fn deflated(&mut self, data: &[u8]) -> &[u8] {
        let n = self.deflate(data);
        &self.scratch[..n]
    }

    /// zlib-deflates `data` into the scratch buffer; returns the compressed length.
    fn deflate(&mut self, data: &[u8]) -> usize {
        let bound = self.compressor.zlib_compress_bound(data.len());
        if self.scratch.len() < bound {
            self.scratch.resize(bound, 0);
        }
        self.compressor
            .zlib_compress(data, &mut self.scratch)
            .expect("buffer sized by zlib_compress_bound")
    }

    /// Picks the encoding for `data` and returns it with the bytes to base64: the deflated form
    /// when `compress` asks for it and it pays, else `data` itself. Text has already been sent as
    /// text where it could be, so everything that reaches here is binary.
    pub fn choose<'a>(&'a mut self, data: &'a [u8], compress: Compress) -> (Encoding, &'a [u8]) {
        match self.deflate_if_worth(data, compress) {
            Some(n) => (Encoding::Base64Compressed, &self.scratch[..n]),
            None => (Encoding::Base64Binary, data),
        }
    }

    /// `choose` without borrowing `data` in its answer: the deflated length, the bytes left in
    /// `deflated_len`'s buffer, or None to send `data` as it is.
    pub fn deflate_if_worth(&mut self, data: &[u8], compress: Compress) -> Option<usize> {
        let try_deflate = match compress {
            Compress::Never => false,
            Compress::Always => true,
            Compress::Auto => {
                data.len() >= MIN_COMPRESS && !is_precompressed(data) && {
                    entropy(&data[..data.len().min(PROBE)]) < INCOMPRESSIBLE_BITS
                }
            }
        };
        if try_deflate {
            let n = self.deflate(data);
            if n < data.len() || compress == Compress::Always {
                return Some(n);
            }
        }
        None
    }

    /// The first `n` bytes deflated last.
    pub fn deflated_len(&self, n: usize) -> &[u8] {
        &self.scratch[..n]
    }
}

/// Per-thread working memory, kept across records so that big buffers are not allocated (and
/// their pages faulted in) again for every record.
pub struct Scratch {
    pub deflater: Deflater,
    /// `content_base64` decoded, or a `content_path` file read.
    pub bytes: Vec<u8>,
    /// The `content_path` file the planning threads opened for the record being encoded, if
    /// any: taken by its read, dropped (closed) after the record.
    pub(crate) opened: Option<OpenedFile>,
}

/// Above this a scratch buffer is given back after use: one huge record must not pin its size.
const KEEP: usize = 4 << 20;

impl Scratch {
    pub fn new(level: u8) -> Self {
        Scratch {
            deflater: Deflater::new(level),
            bytes: Vec::new(),
            opened: None,
        }
    }

    /// Gives back the bytes buffer if it is big, once its content is deflated: a big file's
    /// bytes and its base64 are then never held together.
    pub fn release_bytes(bytes: &mut Vec<u8>) {
        if bytes.capacity() > KEEP {
            *bytes = Vec::new();
        }
    }

    pub fn trim(&mut self) {
        if self.bytes.capacity() > KEEP {
            self.bytes = Vec::new();
        }
        if self.deflater.scratch.capacity() > KEEP {
            self.deflater.scratch = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn inflate(b64: &[u8]) -> Vec<u8> {
        let raw = STANDARD.decode_to_vec(b64).unwrap();
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn compressible_binary_is_deflated_and_round_trips() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        let mut out = Vec::new();
        let mut d = Deflater::new(6);
        let (enc, payload) = d.choose(&data, Compress::Auto);
        base64_into(&mut out, payload);
        assert_eq!(enc, Encoding::Base64Compressed);
        assert!(out.len() < data.len() / 10);
        assert_eq!(inflate(&out), data);
    }

    #[test]
    fn incompressible_and_precompressed_data_is_only_base64() {
        let mut state = 0x2545F4914F6CDD1Du64;
        let noise: Vec<u8> = (0..200_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut d = Deflater::new(6);
        let (enc, payload) = d.choose(&noise, Compress::Auto);
        assert_eq!(enc, Encoding::Base64Binary);
        assert_eq!(payload, &noise[..]);

        let zipped = [b"PK\x03\x04".as_slice(), &[0u8; 4096]].concat();
        assert_eq!(d.choose(&zipped, Compress::Auto).0, Encoding::Base64Binary);
        let (enc, payload) = d.choose(&zipped, Compress::Always);
        assert_eq!(enc, Encoding::Base64Compressed);
        let mut out = Vec::new();
        base64_into(&mut out, payload);
        assert_eq!(inflate(&out), zipped);
        // Small data is not worth the zlib header.
        assert_eq!(
            d.choose(&[0u8; 64], Compress::Auto).0,
            Encoding::Base64Binary
        );
    }

    #[test]
    fn entropy_tells_noise_from_structure() {
        let mut state = 1u64;
        let noise: Vec<u8> = (0..65536)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                (state >> 56) as u8
            })
            .collect();
        assert!(entropy(&noise) > 7.9);
        assert!(entropy(b"aaaaaaaa") < 0.01);
        assert!(
            entropy(
                "the search appliance indexes the feed "
                    .repeat(100)
                    .as_bytes()
            ) < 4.5
        );
    }

    #[test]
    fn never_means_plain_base64() {
        let data = vec![7u8; 10_000];
        assert_eq!(
            Deflater::new(6).choose(&data, Compress::Never).0,
            Encoding::Base64Binary
        );
    }

    fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
        let mut out = vec![1, 2, 3];
        decode_base64_into(text, &mut out).map(|()| out)
    }

    #[test]
    fn user_base64_tolerates_wrapping_and_missing_padding_but_not_garbage() {
        assert_eq!(decode_base64("Zm9v\nYmFy\n").unwrap(), b"foobar");
        assert_eq!(decode_base64("Zm9vYg").unwrap(), b"foob");
        assert_eq!(decode_base64("Zm9vYg==").unwrap(), b"foob");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("Zm9v!").unwrap_err().contains("offset 4"));
        assert!(decode_base64("Z").is_err());
    }

    #[test]
    fn base64_appends_after_existing_bytes() {
        let mut out = b"<x>".to_vec();
        base64_into(&mut out, b"foobar");
        assert_eq!(out, b"<x>Zm9vYmFy");
    }
}
