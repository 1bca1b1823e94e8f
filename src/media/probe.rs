//! What a media file's first bytes and its containers' own headers say: the format by magic
//! bytes, lengths the headers declare past the end of the file, an mp4 index after its
//! media, a variable-bitrate mp3 without a seek table. Pure functions over bytes the
//! caller read, so `musicctl verify` can check a large library at disk speed.
//!
//! Written here rather than taken from a crate: `infer` knows neither WavPack, CAF, DFF
//! nor AC-3 and calls Matroska and 3GPP video, and no crate reports the declared lengths
//! (the RIFF size, mp4 atom sizes, the mp3 Xing/Info and VBRI byte counts) or frame
//! bitrates without decoding; `symphonia` decodes, which is the deep pass's job.

use std::io::{self, Read, Seek, SeekFrom};

/// A container or stream format, as its magic bytes tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// MPEG audio (mp3): an ID3v2 tag or a frame sync.
    Mpeg,
    /// ISO base media (mp4, m4a, m4b, 3gp): `ftyp`.
    Mp4,
    /// AAC in ADTS frames.
    Adts,
    /// FLAC: `fLaC`.
    Flac,
    /// Ogg (Vorbis, Opus, Speex, FLAC in Ogg): `OggS`.
    Ogg,
    /// RIFF WAVE (or RF64).
    Wav,
    /// Matroska or WebM: the EBML magic.
    Matroska,
    /// AIFF or AIFF-C: `FORM` … `AIFF`/`AIFC`.
    Aiff,
    /// WavPack: `wvpk`.
    WavPack,
    /// Monkey's Audio: `MAC `.
    Ape,
    /// DSD stream file: `DSD `.
    Dsf,
    /// DSDIFF: `FRM8`.
    Dff,
    /// Core Audio Format: `caff`.
    Caf,
    /// Standard MIDI file: `MThd`.
    Midi,
    /// AMR: `#!AMR`.
    Amr,
    /// AC-3: its sync word.
    Ac3,
}

impl Format {
    /// The format a file name's extension promises, if it names an audio type.
    pub(crate) fn of_extension(extension: &str) -> Option<Format> {
        Some(match extension.to_ascii_lowercase().as_str() {
            "mp3" => Format::Mpeg,
            "m4a" | "mp4" | "m4b" | "3gp" => Format::Mp4,
            "aac" => Format::Adts,
            "flac" => Format::Flac,
            "ogg" | "oga" | "opus" | "spx" => Format::Ogg,
            "wav" => Format::Wav,
            "webm" | "weba" | "mka" => Format::Matroska,
            "aiff" | "aif" | "aifc" => Format::Aiff,
            "wv" => Format::WavPack,
            "ape" => Format::Ape,
            "dsf" => Format::Dsf,
            "dff" => Format::Dff,
            "caf" => Format::Caf,
            "mid" | "midi" => Format::Midi,
            "amr" => Format::Amr,
            "ac3" => Format::Ac3,
            _ => return None,
        })
    }

    /// A short name for reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Mpeg => "mp3",
            Format::Mp4 => "mp4",
            Format::Adts => "aac",
            Format::Flac => "flac",
            Format::Ogg => "ogg",
            Format::Wav => "wav",
            Format::Matroska => "matroska",
            Format::Aiff => "aiff",
            Format::WavPack => "wavpack",
            Format::Ape => "ape",
            Format::Dsf => "dsf",
            Format::Dff => "dff",
            Format::Caf => "caf",
            Format::Midi => "midi",
            Format::Amr => "amr",
            Format::Ac3 => "ac3",
        }
    }
}

/// The format of a file that starts with `head` (its first bytes; 64 are enough for every
/// magic, more lets an mp3 behind a small ID3 tag be confirmed).
pub fn sniff(head: &[u8]) -> Option<Format> {
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    if at(0, b"ID3") {
        // A tag leads; what follows it decides when it is in `head`, else mp3 (what ID3v2
        // almost always precedes).
        return Some(
            id3_len(head)
                .and_then(|len| head.get(len..))
                .filter(|rest| rest.len() >= 4)
                .and_then(sniff)
                .unwrap_or(Format::Mpeg),
        );
    }
    let format = if at(0, b"fLaC") {
        Format::Flac
    } else if at(0, b"OggS") {
        Format::Ogg
    } else if (at(0, b"RIFF") || at(0, b"RF64")) && at(8, b"WAVE") {
        Format::Wav
    } else if at(4, b"ftyp") {
        Format::Mp4
    } else if at(0, &[0x1A, 0x45, 0xDF, 0xA3]) {
        Format::Matroska
    } else if at(0, b"FORM") && (at(8, b"AIFF") || at(8, b"AIFC")) {
        Format::Aiff
    } else if at(0, b"wvpk") {
        Format::WavPack
    } else if at(0, b"MAC ") {
        Format::Ape
    } else if at(0, b"DSD ") {
        Format::Dsf
    } else if at(0, b"FRM8") {
        Format::Dff
    } else if at(0, b"caff") {
        Format::Caf
    } else if at(0, b"MThd") {
        Format::Midi
    } else if at(0, b"#!AMR") {
        Format::Amr
    } else if at(0, &[0x0B, 0x77]) {
        Format::Ac3
    } else if head.len() >= 2 && head[0] == 0xFF && head[1] & 0xF6 == 0xF0 {
        Format::Adts
    } else if mpeg_frame(head).is_some() {
        Format::Mpeg
    } else {
        return None;
    };
    Some(format)
}

/// The length of an ID3v2 tag at the start of `head` (header, body and footer).
fn id3_len(head: &[u8]) -> Option<usize> {
    if head.len() < 10 || &head[..3] != b"ID3" {
        return None;
    }
    let size = head[6..10].iter().try_fold(0usize, |acc, b| {
        (b & 0x80 == 0).then_some(acc << 7 | usize::from(*b))
    })?;
    let footer = if head[5] & 0x10 != 0 { 10 } else { 0 };
    Some(10 + size + footer)
}

/// An MPEG audio frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    /// MPEG-1 (else 2 or 2.5).
    mpeg1: bool,
    /// Layer 3.
    layer3: bool,
    /// Kilobits per second.
    bitrate: u32,
    /// Hertz.
    sample_rate: u32,
    padding: bool,
    mono: bool,
}

impl Frame {
    /// Bytes in the frame, header included.
    fn len(&self) -> usize {
        let per_frame = if self.layer3 && !self.mpeg1 { 72 } else { 144 };
        (per_frame * self.bitrate as usize * 1000 / self.sample_rate as usize)
            + usize::from(self.padding)
    }

    /// Where a Xing/Info header sits, from the frame's start: after the side information.
    fn xing_offset(&self) -> usize {
        4 + match (self.mpeg1, self.mono) {
            (true, false) => 32,
            (true, true) | (false, false) => 17,
            (false, true) => 9,
        }
    }
}

/// The frame header at the start of `bytes`, if it is one (layer 3 or 2, a valid bitrate
/// and sample rate).
fn mpeg_frame(bytes: &[u8]) -> Option<Frame> {
    let header = bytes.get(..4)?;
    if header[0] != 0xFF || header[1] & 0xE0 != 0xE0 {
        return None;
    }
    let version = (header[1] >> 3) & 0x3; // 0: 2.5, 2: 2, 3: 1
    let layer = (header[1] >> 1) & 0x3; // 1: III, 2: II, 3: I
    if version == 1 || layer == 0 {
        return None;
    }
    let mpeg1 = version == 3;
    let bitrate_index = usize::from(header[2] >> 4);
    let rate_index = usize::from((header[2] >> 2) & 0x3);
    if bitrate_index == 0 || bitrate_index == 15 || rate_index == 3 {
        return None;
    }
    const V1_L3: [u32; 15] = [
        0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
    ];
    const V1_L2: [u32; 15] = [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
    ];
    const V1_L1: [u32; 15] = [
        0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
    ];
    const V2_L1: [u32; 15] = [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256,
    ];
    const V2_L23: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
    let bitrate = match (mpeg1, layer) {
        (true, 1) => V1_L3[bitrate_index],
        (true, 2) => V1_L2[bitrate_index],
        (true, _) => V1_L1[bitrate_index],
        (false, 3) => V2_L1[bitrate_index],
        (false, _) => V2_L23[bitrate_index],
    };
    let base = [44_100, 48_000, 32_000][rate_index];
    let sample_rate = match version {
        3 => base,
        2 => base / 2,
        _ => base / 4,
    };
    Some(Frame {
        mpeg1,
        layer3: layer == 1,
        bitrate,
        sample_rate,
        padding: header[2] & 0x2 != 0,
        mono: header[3] >> 6 == 3,
    })
}

/// What the headers of a file say beyond its format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    /// The file ends before a length its headers declare: what was declared.
    pub(crate) truncated: Option<String>,
    /// An mp4 whose `moov` comes after its `mdat`.
    pub(crate) slow_start: bool,
    /// A variable-bitrate mp3 without a Xing, Info or VBRI header.
    pub(crate) no_seek_table: bool,
}

/// How much of an mp3's frames the shallow pass follows to see whether the bitrate varies.
const MP3_SCAN: usize = 256 * 1024;

/// Reads what `format`'s headers declare from `file` (of `len` bytes), a few small reads.
pub fn headers<F: Read + Seek>(file: &mut F, len: u64, format: Format) -> io::Result<Headers> {
    let mut found = Headers::default();
    match format {
        Format::Wav | Format::Aiff => {
            let mut head = [0u8; 8];
            read_at(file, 0, &mut head)?;
            let declared = if format == Format::Wav {
                u32::from_le_bytes([head[4], head[5], head[6], head[7]])
            } else {
                u32::from_be_bytes([head[4], head[5], head[6], head[7]])
            };
            // RF64 puts 0xFFFFFFFF here and the real size in its ds64 chunk.
            if declared != u32::MAX && u64::from(declared) + 8 > len {
                found.truncated = Some(format!(
                    "the header declares {} bytes, the file has {len}",
                    u64::from(declared) + 8
                ));
            }
        }
        Format::Mp4 => {
            let mut offset = 0u64;
            let mut seen_mdat = false;
            while offset + 8 <= len {
                let mut atom = [0u8; 16];
                let got = read_at(file, offset, &mut atom)?;
                if got < 8 {
                    break;
                }
                let size32 = u32::from_be_bytes([atom[0], atom[1], atom[2], atom[3]]);
                let kind = [atom[4], atom[5], atom[6], atom[7]];
                let size = match size32 {
                    0 => len - offset,
                    1 if got >= 16 => u64::from_be_bytes([
                        atom[8], atom[9], atom[10], atom[11], atom[12], atom[13], atom[14],
                        atom[15],
                    ]),
                    1 => break,
                    n => u64::from(n),
                };
                if size < 8 {
                    found.truncated = Some(format!(
                        "atom at {offset} declares {size} bytes, less than its header"
                    ));
                    break;
                }
                // A 64-bit size is whatever the file says: no sum may overflow.
                let end = offset.saturating_add(size);
                if end > len {
                    found.truncated = Some(format!(
                        "atom '{}' at {offset} declares {size} bytes, {} past the end",
                        String::from_utf8_lossy(&kind),
                        end - len
                    ));
                    break;
                }
                match &kind {
                    b"mdat" => seen_mdat = true,
                    b"moov" if seen_mdat => found.slow_start = true,
                    _ => {}
                }
                offset += size;
            }
        }
        Format::Mpeg => {
            // The tag's header says where the frames start; their first 4 KiB hold the
            // Xing/Info or VBRI header, and only a file without one is read further.
            let mut tag = [0u8; 10];
            let got = read_at(file, 0, &mut tag)?;
            let start = id3_len(&tag[..got]).map_or(0, |n| n as u64);
            let mut head = [0u8; 4096];
            let got = read_at(file, start, &mut head)?;
            if !mp3_seek_header(&head[..got], start, len, &mut found) {
                let wanted = len.saturating_sub(start).min(MP3_SCAN as u64);
                let mut frames = vec![0u8; usize::try_from(wanted).unwrap_or(MP3_SCAN)];
                let got = read_at(file, start, &mut frames)?;
                found.no_seek_table = bitrate_varies(&frames[..got]);
            }
        }
        _ => {}
    }
    Ok(found)
}

/// Checks the Xing/Info or VBRI header of an mp3 whose frames (`frames`, read from byte
/// `start` of a file of `len` bytes) begin with one: its byte count against the file.
/// False when there is none (nor a frame to hold one), so the caller looks at bitrates.
fn mp3_seek_header(frames: &[u8], start: u64, len: u64, found: &mut Headers) -> bool {
    let Some(frame) = mpeg_frame(frames) else {
        return true;
    };
    let be32 = |at: usize| {
        frames
            .get(at..at + 4)
            .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
    };
    let xing_at = frame.xing_offset();
    let vbri_at = 4 + 32;
    let declared = match frames.get(xing_at..xing_at + 4) {
        Some(b"Xing" | b"Info") => {
            let flags = be32(xing_at + 4).unwrap_or(0);
            let bytes_at = xing_at + 8 + if flags & 0x1 != 0 { 4 } else { 0 };
            (flags & 0x2 != 0).then(|| be32(bytes_at)).flatten()
        }
        _ if frames.get(vbri_at..vbri_at + 4) == Some(b"VBRI") => be32(vbri_at + 10),
        _ => return false,
    };
    if let Some(stream_bytes) = declared {
        let available = len.saturating_sub(start);
        // The count covers the frames, the header frame included; a stray ID3v1 tag
        // (128 bytes) at the end is not part of it.
        if stream_bytes > available {
            found.truncated = Some(format!(
                "the mp3 header declares {stream_bytes} bytes of frames, the file has {available} after its tag"
            ));
        }
    }
    true
}

/// Whether the frames at the start of `frames` come at more than one bitrate.
fn bitrate_varies(frames: &[u8]) -> bool {
    let mut at = 0;
    let mut first = None;
    while let Some(next) = frames.get(at..).and_then(mpeg_frame) {
        match first {
            None => first = Some(next.bitrate),
            Some(bitrate) if bitrate != next.bitrate => return true,
            Some(_) => {}
        }
        at += next.len().max(1);
    }
    false
}

/// What a stream's own container says about it (`symphonia`), for the catalogue.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StreamFacts {
    /// The codec's short name (`mp3`, `aac`, `flac`, `vorbis`, `pcm_s16le`, ...).
    pub(crate) codec: Option<String>,
    /// Seconds, when the container declares the length.
    pub(crate) duration: Option<f64>,
    /// Hertz.
    pub(crate) sample_rate: Option<u32>,
    /// Bits per second over the whole file, when the duration is known.
    pub(crate) bitrate: Option<u64>,
}

/// Opens `file` with symphonia's demuxers (`extension` as a hint): the default track.
fn open_stream(
    file: std::fs::File,
    extension: Option<&str>,
) -> Result<Box<dyn symphonia::core::formats::FormatReader>, String> {
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;
    use symphonia::core::probe::Hint;
    let mut hint = Hint::new();
    if let Some(extension) = extension {
        hint.with_extension(extension);
    }
    let stream = MediaSourceStream::new(Box::new(file), Default::default());
    symphonia::default::get_probe()
        .format(
            &hint,
            stream,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map(|probed| probed.format)
        .map_err(|e| e.to_string())
}

/// Codec, duration, sample rate and bitrate of a file of `len` bytes, from its headers.
pub(crate) fn stream_facts(
    file: std::fs::File,
    extension: Option<&str>,
    len: u64,
) -> Result<StreamFacts, String> {
    let format = open_stream(file, extension)?;
    let track = format
        .default_track()
        .ok_or_else(|| "no audio track".to_string())?;
    let params = &track.codec_params;
    let codec = symphonia::default::get_codecs()
        .get_codec(params.codec)
        .map(|descriptor| descriptor.short_name.to_string());
    let duration = match (params.n_frames, params.time_base, params.sample_rate) {
        (Some(frames), Some(base), _) => {
            let time = base.calc_time(frames);
            Some(time.seconds as f64 + time.frac)
        }
        (Some(frames), None, Some(rate)) if rate > 0 => Some(frames as f64 / f64::from(rate)),
        _ => None,
    }
    .filter(|seconds| *seconds > 0.0);
    Ok(StreamFacts {
        codec,
        duration,
        sample_rate: params.sample_rate,
        bitrate: duration.map(|seconds| (len as f64 * 8.0 / seconds).round() as u64),
    })
}

/// What demuxing a whole file found: whether its stream ends where its headers say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Demuxed {
    /// Sample frames in the packets read.
    pub(crate) frames: u64,
    /// Sample frames the container declares, when it does.
    pub(crate) declared: Option<u64>,
    /// The stream broke before its end: why.
    pub(crate) broken: Option<String>,
}

impl Demuxed {
    /// A short stream or a broken one: what `verify --deep` reports as `truncated`.
    pub(crate) fn truncation(&self, largest_packet: u64) -> Option<String> {
        if let Some(why) = &self.broken {
            return Some(format!(
                "the stream breaks after {} frames: {why}",
                self.frames
            ));
        }
        let declared = self.declared?;
        (self.frames.saturating_add(largest_packet) < declared).then(|| {
            format!(
                "{} sample frames declared, {} in the file",
                declared, self.frames
            )
        })
    }
}

/// Reads every packet of the default track to the end (`verify --deep`): demuxing, not
/// decoding, so it runs at disk speed. Returns the largest packet's length too.
pub(crate) fn demux_to_end(
    file: std::fs::File,
    extension: Option<&str>,
) -> Result<(Demuxed, u64), String> {
    use symphonia::core::errors::Error;
    let mut format = open_stream(file, extension)?;
    let track = format
        .default_track()
        .ok_or_else(|| "no audio track".to_string())?;
    let (id, declared) = (track.id, track.codec_params.n_frames);
    let mut found = Demuxed {
        declared,
        ..Demuxed::default()
    };
    let mut largest = 0;
    loop {
        match format.next_packet() {
            Ok(packet) if packet.track_id() == id => {
                found.frames = found.frames.saturating_add(packet.dur);
                largest = largest.max(packet.dur);
            }
            Ok(_) => {}
            Err(Error::IoError(err)) if err.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(Error::ResetRequired) => break,
            Err(err) => {
                found.broken = Some(err.to_string());
                break;
            }
        }
    }
    Ok((found, largest))
}

fn read_at<F: Read + Seek>(file: &mut F, offset: u64, buffer: &mut [u8]) -> io::Result<usize> {
    file.seek(SeekFrom::Start(offset))?;
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// An MPEG-1 layer 3 frame header: 44.1 kHz, stereo, `bitrate_index`.
    fn frame_header(bitrate_index: u8) -> [u8; 4] {
        [0xFF, 0xFB, bitrate_index << 4, 0x00]
    }

    fn frames(bitrates: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for index in bitrates {
            let header = frame_header(*index);
            let frame = mpeg_frame(&header).expect("a frame");
            let mut bytes = vec![0u8; frame.len()];
            bytes[..4].copy_from_slice(&header);
            out.extend(bytes);
        }
        out
    }

    /// Whatever the bytes, the checks answer without panicking (sizes are the file's word).
    #[test]
    fn hostile_headers_never_panic() {
        let mut huge = 1u32.to_be_bytes().to_vec();
        huge.extend_from_slice(b"mdat");
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        let len = huge.len() as u64;
        let found = headers(&mut Cursor::new(&huge), len, Format::Mp4).expect("read");
        assert!(found.truncated.is_some());
        for seed in 0u8..=255 {
            let bytes: Vec<u8> = (0..300u32)
                .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
                .collect();
            let _ = sniff(&bytes);
            for format in [Format::Mpeg, Format::Mp4, Format::Wav, Format::Aiff] {
                let _ = headers(&mut Cursor::new(&bytes), bytes.len() as u64, format);
            }
        }
    }

    #[test]
    fn magic_bytes_name_the_format() {
        let cases: [(&[u8], Option<Format>); 12] = [
            (b"fLaC\0\0\0\x22", Some(Format::Flac)),
            (b"OggS\0\x02", Some(Format::Ogg)),
            (b"RIFF\x24\0\0\0WAVEfmt ", Some(Format::Wav)),
            (b"\0\0\0\x20ftypM4A ", Some(Format::Mp4)),
            (b"FORM\0\0\0\x10AIFF", Some(Format::Aiff)),
            (b"wvpk", Some(Format::WavPack)),
            (b"caff\0\x01", Some(Format::Caf)),
            (b"#!AMR\n", Some(Format::Amr)),
            (&[0xFF, 0xF1, 0x50, 0x80], Some(Format::Adts)),
            (&[0xFF, 0xFB, 0x90, 0x00], Some(Format::Mpeg)),
            (b"hello, world", None),
            (b"", None),
        ];
        for (head, expected) in cases {
            assert_eq!(sniff(head), expected, "{head:?}");
        }
    }

    #[test]
    fn an_id3_tag_is_looked_behind() {
        let mut tagged = b"ID3\x04\0\0\0\0\0\x04\0\0\0\0".to_vec();
        tagged.extend_from_slice(b"fLaC\0\0\0\x22");
        assert_eq!(sniff(&tagged), Some(Format::Flac));
        assert_eq!(sniff(b"ID3\x04\0\0\0\x01\0\0"), Some(Format::Mpeg));
    }

    #[test]
    fn a_riff_size_past_the_end_is_truncation() {
        let mut wav = b"RIFF".to_vec();
        wav.extend_from_slice(&1000u32.to_le_bytes());
        wav.extend_from_slice(b"WAVE");
        wav.resize(500, 0);
        let found = headers(&mut Cursor::new(&wav), 500, Format::Wav).expect("read");
        assert!(found.truncated.is_some());
        wav.resize(1008, 0);
        let found = headers(&mut Cursor::new(&wav), 1008, Format::Wav).expect("read");
        assert_eq!(found, Headers::default());
    }

    #[test]
    fn mp4_atoms_past_the_end_and_moov_after_mdat() {
        let atom = |kind: &[u8], size: u32| {
            let mut a = size.to_be_bytes().to_vec();
            a.extend_from_slice(kind);
            a.resize(size as usize, 0);
            a
        };
        let mut late = atom(b"ftyp", 16);
        late.extend(atom(b"mdat", 64));
        late.extend(atom(b"moov", 32));
        let len = late.len() as u64;
        let found = headers(&mut Cursor::new(&late), len, Format::Mp4).expect("read");
        assert!(found.slow_start && found.truncated.is_none(), "{found:?}");
        let cut = &late[..100];
        let found = headers(&mut Cursor::new(cut), 100, Format::Mp4).expect("read");
        assert!(found.truncated.is_some(), "{found:?}");
        let mut fast = atom(b"ftyp", 16);
        fast.extend(atom(b"moov", 32));
        fast.extend(atom(b"mdat", 64));
        let len = fast.len() as u64;
        let found = headers(&mut Cursor::new(&fast), len, Format::Mp4).expect("read");
        assert_eq!(found, Headers::default());
    }

    #[test]
    fn a_variable_bitrate_mp3_without_a_seek_table_is_told() {
        let cbr = frames(&[9, 9, 9, 9]);
        let len = cbr.len() as u64;
        assert_eq!(
            headers(&mut Cursor::new(&cbr), len, Format::Mpeg).expect("read"),
            Headers::default()
        );
        let vbr = frames(&[9, 11, 5, 9]);
        let len = vbr.len() as u64;
        assert!(
            headers(&mut Cursor::new(&vbr), len, Format::Mpeg)
                .expect("read")
                .no_seek_table
        );
    }

    #[test]
    fn a_xing_byte_count_past_the_end_is_truncation() {
        let mut mp3 = frames(&[9, 9, 9]);
        let frame = mpeg_frame(&mp3).expect("frame");
        let at = frame.xing_offset();
        mp3[at..at + 4].copy_from_slice(b"Xing");
        mp3[at + 4..at + 8].copy_from_slice(&0x3u32.to_be_bytes());
        mp3[at + 8..at + 12].copy_from_slice(&3u32.to_be_bytes());
        let declared = (mp3.len() * 2) as u32;
        mp3[at + 12..at + 16].copy_from_slice(&declared.to_be_bytes());
        let len = mp3.len() as u64;
        let found = headers(&mut Cursor::new(&mp3), len, Format::Mpeg).expect("read");
        assert!(found.truncated.is_some(), "{found:?}");
        let whole = (mp3.len() as u32).to_be_bytes();
        mp3[at + 12..at + 16].copy_from_slice(&whole);
        let found = headers(&mut Cursor::new(&mp3), len, Format::Mpeg).expect("read");
        assert_eq!(found, Headers::default());
    }
}
