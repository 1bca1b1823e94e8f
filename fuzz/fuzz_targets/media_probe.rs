//! Any file's bytes: sniffing the format and reading what its headers declare never panic,
//! and a truncation is only ever reported inside the file's own length.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use musicd::media::probe::{Format, headers, sniff};

fuzz_target!(|bytes: &[u8]| {
    let found = sniff(bytes);
    let len = bytes.len() as u64;
    for format in [Format::Mpeg, Format::Mp4, Format::Wav, Format::Aiff]
        .into_iter()
        .chain(found)
    {
        let _ = headers(&mut Cursor::new(bytes), len, format);
    }
});
