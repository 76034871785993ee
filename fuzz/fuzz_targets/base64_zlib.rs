//! base64 round-trips byte for byte; any text decodes or is refused, never a panic; deflated
//! content inflates with plain zlib to what was deflated, at every level, with the deflater of
//! the last input reused as a worker thread reuses its own (a stream left in a bad state by one
//! content would show in the next), and across the blocks of a content larger than one.
#![no_main]

use std::cell::RefCell;
use std::io::Read;

use fastfeed_core::encode::{base64_into, decode_base64_into, Deflater, IN_BLOCK};
use libfuzzer_sys::fuzz_target;

thread_local! {
    /// A deflater for each level, kept from input to input.
    static DEFLATERS: RefCell<Vec<Deflater>> = RefCell::new((1..=12).map(Deflater::new).collect());
}

/// The input grown past a deflate block: its bytes, then noise seeded by them (output past
/// 256 KB), then its bytes again, repeated: libFuzzer seldom grows an input to megabytes itself.
fn grown(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut state = data.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)) | 1;
    while out.len() < IN_BLOCK / 2 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    while out.len() <= IN_BLOCK + 1 {
        out.extend_from_slice(if data.is_empty() { b"x" } else { data });
    }
    out
}

fuzz_target!(|input: &[u8]| {
    // The first byte picks the level (1 to 12, ISA-L's three) and whether the content, the
    // rest, is grown past a block.
    let Some((&first, data)) = input.split_first() else {
        return;
    };
    let big;
    let data = if first & 0x80 != 0 {
        big = grown(data);
        &big[..]
    } else {
        data
    };
    let mut text = Vec::new();
    base64_into(&mut text, data);
    let mut back = Vec::new();
    decode_base64_into(std::str::from_utf8(&text).unwrap(), &mut back).unwrap();
    assert_eq!(back, data);

    if let Ok(any) = std::str::from_utf8(data) {
        let _ = decode_base64_into(any, &mut back);
    }

    let deflated = DEFLATERS.with(|d| d.borrow_mut()[usize::from(first & 0x7f) % 12].deflated(data).to_vec());
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(&deflated[..])
        .read_to_end(&mut inflated)
        .unwrap();
    assert_eq!(inflated, data);
});
