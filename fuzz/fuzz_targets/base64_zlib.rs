//! base64 round-trips byte for byte; any text decodes or is refused, never a panic; deflated
//! content inflates with plain zlib to what was deflated.
#![no_main]

use std::io::Read;

use fastfeed_core::encode::{base64_into, decode_base64_into, Deflater};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut text = Vec::new();
    base64_into(&mut text, data);
    let mut back = Vec::new();
    decode_base64_into(std::str::from_utf8(&text).unwrap(), &mut back).unwrap();
    assert_eq!(back, data);

    if let Ok(any) = std::str::from_utf8(data) {
        let _ = decode_base64_into(any, &mut back);
    }

    let mut deflater = Deflater::new(1);
    let deflated = deflater.deflated(data).to_vec();
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(&deflated[..])
        .read_to_end(&mut inflated)
        .unwrap();
    assert_eq!(inflated, data);
});
