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
use std::ops::ControlFlow;

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
            let (mut seen_mdat, mut slow_start) = (false, false);
            found.truncated = walk_atoms(file, len, 0, |atom| {
                // An atom cut short is the truncation the walk reports, not a layout.
                match &atom.kind {
                    b"mdat" if atom.whole => seen_mdat = true,
                    b"moov" if atom.whole && seen_mdat => slow_start = true,
                    _ => {}
                }
                ControlFlow::Continue(())
            })?;
            found.slow_start = slow_start;
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

/// One top-level box of an mp4, as [`walk_atoms`] found it.
struct Atom {
    /// Where it starts.
    offset: u64,
    kind: [u8; 4],
    /// Its header's length: 8, or 16 with a 64-bit size.
    header: u64,
    /// Whether it ends within the file.
    whole: bool,
}

/// Walks the top-level boxes of an mp4 (of `len` bytes) from `start`, handing each whose
/// size covers its own header to `visit` until it breaks. Returns what ended the walk early
/// when a size is impossible or runs past the end: the truncation `headers` reports.
fn walk_atoms<F: Read + Seek>(
    file: &mut F,
    len: u64,
    start: u64,
    mut visit: impl FnMut(&Atom) -> ControlFlow<()>,
) -> io::Result<Option<String>> {
    let mut offset = start;
    while offset.saturating_add(8) <= len {
        let mut head = [0u8; 16];
        let got = read_at(file, offset, &mut head)?;
        if got < 8 {
            break;
        }
        let size32 = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let kind = [head[4], head[5], head[6], head[7]];
        let (size, header) = match size32 {
            0 => (len - offset, 8),
            1 if got >= 16 => (
                u64::from_be_bytes([
                    head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
                ]),
                16,
            ),
            1 => break,
            n => (u64::from(n), 8),
        };
        if size < header {
            return Ok(Some(format!(
                "atom at {offset} declares {size} bytes, less than its header"
            )));
        }
        // A 64-bit size is whatever the file says: no sum may overflow.
        let end = offset.saturating_add(size);
        let atom = Atom {
            offset,
            kind,
            header,
            whole: end <= len,
        };
        if visit(&atom).is_break() {
            break;
        }
        if !atom.whole {
            return Ok(Some(format!(
                "atom '{}' at {offset} declares {size} bytes, {} past the end",
                String::from_utf8_lossy(&kind),
                end - len
            )));
        }
        offset = end;
    }
    Ok(None)
}

/// How far past its ID3 tag an mp3's first frame is looked for: encoders pad, a few
/// leave junk, none that far.
const MP3_SYNC_SCAN: usize = 4096;

/// Bounds on the walks to the first audio byte: far past any real file's headers (a FLAC
/// has a handful of metadata blocks, an mp4 a handful of top-level boxes before `mdat`),
/// so a hostile file costs a bounded number of small reads.
const MAX_BLOCKS: usize = 1024;

/// Ogg header pages to walk: a Vorbis comment holding cover art spans one page per
/// 64 KiB, so this covers 256 MiB of headers.
const MAX_OGG_PAGES: usize = 4096;

/// Where the first audio frame of a `format` file (of `len` bytes) starts, in bytes from
/// its start: what a range request must reach before it carries any sound. `None` when
/// the format is not one whose headers say it, or they do not.
pub(crate) fn audio_offset<F: Read + Seek>(
    file: &mut F,
    len: u64,
    format: Format,
) -> io::Result<Option<u64>> {
    // `sniff` looks behind an ID3 tag whatever follows it (FLAC is often tagged so).
    let mut tag = [0u8; 10];
    let got = read_at(file, 0, &mut tag)?;
    let start = id3_len(&tag[..got]).map_or(0, |n| n as u64);
    let offset = match format {
        Format::Mpeg => {
            let mut head = vec![0u8; MP3_SYNC_SCAN + 4];
            let got = read_at(file, start, &mut head)?;
            first_frame(&head[..got]).map(|at| start + at as u64)
        }
        Format::Flac => flac_audio(file, len, start)?,
        Format::Ogg => ogg_audio(file, len, start)?,
        Format::Mp4 => {
            let (mut mdat, mut atoms) = (None, 0);
            walk_atoms(file, len, start, |atom| {
                atoms += 1;
                if &atom.kind == b"mdat" {
                    mdat = Some(atom.offset + atom.header);
                    return ControlFlow::Break(());
                }
                if atoms < MAX_BLOCKS {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })?;
            mdat
        }
        Format::Wav => wav_audio(file, len, start)?,
        _ => None,
    };
    // Headers that end where the file does leave no audio frame to point at.
    Ok(offset.filter(|offset| *offset < len))
}

/// The first frame header in `bytes` that a second one follows, or that ends past what
/// was read (so a sync pattern in junk or in a misplaced tag's body is passed over).
fn first_frame(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find(|&at| {
        mpeg_frame(&bytes[at..]).is_some_and(|frame| {
            match bytes.get(at + frame.len()..).filter(|next| next.len() >= 4) {
                Some(next) => mpeg_frame(next).is_some(),
                None => true,
            }
        })
    })
}

/// Past `fLaC` (at `start`) and its metadata blocks.
fn flac_audio<F: Read + Seek>(file: &mut F, len: u64, start: u64) -> io::Result<Option<u64>> {
    let mut magic = [0u8; 4];
    if read_at(file, start, &mut magic)? < 4 || &magic != b"fLaC" {
        return Ok(None);
    }
    let mut offset = start + 4;
    for _ in 0..MAX_BLOCKS {
        let mut block = [0u8; 4];
        if read_at(file, offset, &mut block)? < 4 {
            return Ok(None);
        }
        let size = u64::from(u32::from_be_bytes([0, block[1], block[2], block[3]]));
        offset += 4 + size;
        if offset > len {
            return Ok(None);
        }
        if block[0] & 0x80 != 0 {
            return Ok(Some(offset));
        }
    }
    Ok(None)
}

/// The first Ogg page (from `start`) that completes an audio packet: header pages carry
/// granule position 0, pages on which no packet ends carry -1.
fn ogg_audio<F: Read + Seek>(file: &mut F, len: u64, start: u64) -> io::Result<Option<u64>> {
    let mut offset = start;
    for _ in 0..MAX_OGG_PAGES {
        let mut page = [0u8; 27];
        if read_at(file, offset, &mut page)? < 27 || &page[..4] != b"OggS" {
            return Ok(None);
        }
        let granule = u64::from_le_bytes([
            page[6], page[7], page[8], page[9], page[10], page[11], page[12], page[13],
        ]);
        if granule != 0 && granule != u64::MAX {
            return Ok(Some(offset));
        }
        let mut segments = [0u8; 255];
        let count = usize::from(page[26]);
        if read_at(file, offset + 27, &mut segments[..count])? < count {
            return Ok(None);
        }
        let body: u64 = segments[..count].iter().map(|&n| u64::from(n)).sum();
        offset += 27 + count as u64 + body;
        if offset >= len {
            return Ok(None);
        }
    }
    Ok(None)
}

/// The payload of a RIFF WAVE's (at `start`) `data` chunk.
fn wav_audio<F: Read + Seek>(file: &mut F, len: u64, start: u64) -> io::Result<Option<u64>> {
    let mut riff = [0u8; 12];
    if read_at(file, start, &mut riff)? < 12
        || !(&riff[..4] == b"RIFF" || &riff[..4] == b"RF64")
        || &riff[8..] != b"WAVE"
    {
        return Ok(None);
    }
    let mut offset = start + 12;
    for _ in 0..MAX_BLOCKS {
        let mut chunk = [0u8; 8];
        if read_at(file, offset, &mut chunk)? < 8 {
            return Ok(None);
        }
        if &chunk[..4] == b"data" {
            return Ok(Some(offset + 8));
        }
        let size = u64::from(u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]));
        // Chunks are word-aligned: an odd size is followed by a pad byte.
        offset += 8 + size + (size & 1);
        if offset >= len {
            return Ok(None);
        }
    }
    Ok(None)
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
            for format in [
                Format::Mpeg,
                Format::Flac,
                Format::Ogg,
                Format::Mp4,
                Format::Wav,
                Format::Aiff,
            ] {
                let _ = audio_offset(&mut Cursor::new(&bytes), bytes.len() as u64, format);
                // The same bytes behind each magic, so the walks get past their first check.
                let magic: &[u8] = match format {
                    Format::Flac => b"fLaC",
                    Format::Ogg => b"OggS",
                    Format::Wav => b"RIFF\xff\xff\xff\xffWAVE",
                    Format::Mpeg => b"ID3\x04\0\0\0\0\0\x01",
                    _ => b"",
                };
                let mut behind = magic.to_vec();
                behind.extend_from_slice(&bytes);
                let len = behind.len() as u64;
                if let Ok(Some(offset)) = audio_offset(&mut Cursor::new(&behind), len, format) {
                    assert!(offset < len, "{format:?} {seed}: {offset}");
                }
            }
        }
    }

    /// Sizes that walk nowhere, or in the smallest steps, end in a bounded number of reads.
    #[test]
    fn hostile_walks_to_the_audio_end() {
        let endless = |magic: &[u8], step: &[u8], count: usize| {
            let mut bytes = magic.to_vec();
            for _ in 0..count {
                bytes.extend_from_slice(step);
            }
            bytes
        };
        // Empty metadata blocks, none the last.
        let flac = endless(b"fLaC", &[0, 0, 0, 0], 100_000);
        // Header pages without segments.
        let mut empty_page = b"OggS".to_vec();
        empty_page.resize(27, 0);
        let ogg = endless(b"", &empty_page, 10_000);
        // Empty `free` boxes, and chunks that are not `data`.
        let mp4 = endless(b"", b"\0\0\0\x08free", 100_000);
        let wav = endless(b"RIFF\0\0\0\0WAVE", b"junk\0\0\0\0", 100_000);
        for (bytes, format) in [
            (flac, Format::Flac),
            (ogg, Format::Ogg),
            (mp4, Format::Mp4),
            (wav, Format::Wav),
        ] {
            let mut reads = CountingReads(Cursor::new(&bytes), 0);
            let found = audio_offset(&mut reads, bytes.len() as u64, format).expect("read");
            assert_eq!(found, None, "{format:?}");
            assert!(
                reads.1 <= 2 * MAX_OGG_PAGES + 2,
                "{format:?}: {} reads",
                reads.1
            );
        }
        // A box whose 64-bit size wraps, and a chunk whose size runs past the end.
        let mut huge = 1u32.to_be_bytes().to_vec();
        huge.extend_from_slice(b"free");
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        huge.extend_from_slice(b"\0\0\0\x08mdat");
        let len = huge.len() as u64;
        assert_eq!(
            audio_offset(&mut Cursor::new(&huge), len, Format::Mp4).expect("read"),
            None
        );
        let mut wav = b"RIFF\0\0\0\0WAVEjunk".to_vec();
        wav.extend_from_slice(&u32::MAX.to_le_bytes());
        wav.extend_from_slice(b"data\0\0\0\0");
        let len = wav.len() as u64;
        assert_eq!(
            audio_offset(&mut Cursor::new(&wav), len, Format::Wav).expect("read"),
            None
        );
    }

    /// A reader that counts its seeks (one per `read_at`).
    struct CountingReads<R>(R, usize);

    impl<R: Read> Read for CountingReads<R> {
        fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            self.0.read(buffer)
        }
    }

    impl<R: Seek> Seek for CountingReads<R> {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            self.1 += 1;
            self.0.seek(to)
        }
    }

    /// An ID3v2.4 tag of `body` bytes (a footer too when asked).
    fn id3_tag(body: usize, footer: bool) -> Vec<u8> {
        let size = body as u32;
        let mut tag = b"ID3\x04\0".to_vec();
        tag.push(if footer { 0x10 } else { 0 });
        for shift in [21, 14, 7, 0] {
            tag.push(((size >> shift) & 0x7F) as u8);
        }
        tag.resize(10 + body, 0);
        if footer {
            tag.extend_from_slice(b"3DI\x04\0\x10\0\0\0\0");
        }
        tag
    }

    fn offset_of(bytes: &[u8], format: Format) -> Option<u64> {
        audio_offset(&mut Cursor::new(bytes), bytes.len() as u64, format).expect("read")
    }

    #[test]
    fn an_mp3s_audio_starts_at_its_first_frame_past_the_tag() {
        let audio = frames(&[9, 9, 9]);
        assert_eq!(offset_of(&audio, Format::Mpeg), Some(0));
        let mut tagged = id3_tag(300, false);
        tagged.extend_from_slice(&audio);
        assert_eq!(offset_of(&tagged, Format::Mpeg), Some(310));
        let mut footed = id3_tag(300, true);
        footed.extend_from_slice(&audio);
        assert_eq!(offset_of(&footed, Format::Mpeg), Some(320));
        // Junk after the tag, a sync pattern in it that no frame follows.
        let mut junk = id3_tag(20, false);
        junk.extend_from_slice(b"\0\0");
        junk.extend_from_slice(&frame_header(9));
        junk.extend_from_slice(&[0u8; 10]);
        junk.extend_from_slice(&audio);
        assert_eq!(offset_of(&junk, Format::Mpeg), Some(30 + 2 + 4 + 10));
        // A tag and nothing audio, or a tag that claims more than the file.
        let mut silent = id3_tag(20, false);
        silent.resize(5000, 0);
        assert_eq!(offset_of(&silent, Format::Mpeg), None);
        assert_eq!(offset_of(&id3_tag(20, false)[..15], Format::Mpeg), None);
    }

    #[test]
    fn a_flacs_audio_starts_past_its_last_metadata_block() {
        let mut flac = b"fLaC".to_vec();
        flac.extend_from_slice(&[0x00, 0, 0, 34]);
        flac.extend_from_slice(&[0u8; 34]);
        flac.extend_from_slice(&[0x81, 0, 0, 10]);
        flac.extend_from_slice(&[0u8; 10]);
        let audio_at = flac.len() as u64;
        flac.extend_from_slice(&[0xFF, 0xF8, 0x69, 0x08, 0, 0]);
        assert_eq!(offset_of(&flac, Format::Flac), Some(audio_at));
        let mut tagged = id3_tag(20, false);
        tagged.extend_from_slice(&flac);
        assert_eq!(offset_of(&tagged, Format::Flac), Some(30 + audio_at));
        // A block that runs past the end, and metadata with no frame after it.
        let mut long = flac.clone();
        long[4..8].copy_from_slice(&[0x80, 0x01, 0, 0]);
        assert_eq!(offset_of(&long, Format::Flac), None);
        assert_eq!(offset_of(&flac[..audio_at as usize], Format::Flac), None);
        assert_eq!(offset_of(b"fLa", Format::Flac), None);
    }

    /// An Ogg page at `granule` with a body of `body` bytes.
    fn ogg_page(granule: u64, body: usize) -> Vec<u8> {
        let mut page = b"OggS\0\0".to_vec();
        page.extend_from_slice(&granule.to_le_bytes());
        page.resize(26, 0);
        let mut lacing = vec![255u8; body / 255];
        lacing.push((body % 255) as u8);
        page.push(lacing.len() as u8);
        page.extend_from_slice(&lacing);
        page.resize(page.len() + body, 0x55);
        page
    }

    #[test]
    fn an_oggs_audio_starts_at_its_first_page_past_the_headers() {
        let mut ogg = ogg_page(0, 30);
        // A comment with cover art: a page on which no packet ends, then its end.
        ogg.extend(ogg_page(u64::MAX, 255 * 200));
        ogg.extend(ogg_page(0, 1000));
        let audio_at = ogg.len() as u64;
        assert_eq!(audio_at, 28 + 30 + 228 + 51000 + 31 + 1000);
        ogg.extend(ogg_page(960, 400));
        assert_eq!(offset_of(&ogg, Format::Ogg), Some(audio_at));
        assert_eq!(offset_of(&ogg[..audio_at as usize], Format::Ogg), None);
        let mut lost = ogg.clone();
        lost[audio_at as usize] = b'X';
        assert_eq!(offset_of(&lost, Format::Ogg), None);
    }

    #[test]
    fn an_mp4s_audio_starts_at_its_mdat_payload() {
        let atom = |kind: &[u8], size: u32| {
            let mut a = size.to_be_bytes().to_vec();
            a.extend_from_slice(kind);
            a.resize(size as usize, 0);
            a
        };
        let mut mp4 = atom(b"ftyp", 16);
        mp4.extend(atom(b"moov", 32));
        mp4.extend(atom(b"mdat", 64));
        assert_eq!(offset_of(&mp4, Format::Mp4), Some(56));
        // A 64-bit size puts the payload 16 bytes in; a cut file still has its start.
        let mut large = atom(b"ftyp", 16);
        large.extend_from_slice(&1u32.to_be_bytes());
        large.extend_from_slice(b"mdat");
        large.extend_from_slice(&1000u64.to_be_bytes());
        large.resize(100, 0);
        assert_eq!(offset_of(&large, Format::Mp4), Some(32));
        let mut none = atom(b"ftyp", 16);
        none.extend(atom(b"moov", 32));
        assert_eq!(offset_of(&none, Format::Mp4), None);
    }

    #[test]
    fn a_wavs_audio_starts_at_its_data_payload() {
        let mut wav = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        wav.extend_from_slice(&16u32.to_le_bytes());
        wav.extend_from_slice(&[0u8; 16]);
        // An odd chunk is padded to an even length.
        wav.extend_from_slice(b"LIST");
        wav.extend_from_slice(&5u32.to_le_bytes());
        wav.extend_from_slice(&[0u8; 6]);
        wav.extend_from_slice(b"data");
        wav.extend_from_slice(&8u32.to_le_bytes());
        wav.extend_from_slice(&[0u8; 8]);
        assert_eq!(offset_of(&wav, Format::Wav), Some(12 + 24 + 14 + 8));
        assert_eq!(offset_of(&wav[..50], Format::Wav), None);
        assert_eq!(offset_of(&wav, Format::Aiff), None);
        assert_eq!(offset_of(&wav, Format::Adts), None);
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
