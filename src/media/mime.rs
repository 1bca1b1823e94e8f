//! Content types by file extension, with the audio types players rely on.

use std::path::Path;

/// The `Content-Type` for a file, by its extension (case-insensitive).
pub(crate) fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("mp3") => "audio/mpeg",
        Some("m4a" | "mp4" | "m4b") => "audio/mp4",
        Some("aac") => "audio/aac",
        Some("flac") => "audio/flac",
        Some("ogg" | "oga") => "audio/ogg",
        Some("opus") => "audio/ogg; codecs=opus",
        Some("wav") => "audio/wav",
        Some("webm" | "weba") => "audio/webm",
        // IANA's types where there is one (RFC 4867 AMR, RFC 3839 3GPP, RFC 4184 AC-3,
        // RFC 9559 Matroska), else the names browsers and players recognise.
        Some("aiff" | "aif" | "aifc") => "audio/aiff",
        Some("wv") => "audio/x-wavpack",
        Some("ape") => "audio/x-ape",
        Some("dsf") => "audio/x-dsf",
        Some("dff") => "audio/x-dff",
        Some("mka") => "audio/matroska",
        Some("caf") => "audio/x-caf",
        Some("spx") => "audio/ogg; codecs=speex",
        Some("mid" | "midi") => "audio/midi",
        Some("amr") => "audio/amr",
        Some("3gp") => "audio/3gpp",
        Some("ac3") => "audio/ac3",
        _ => "application/octet-stream",
    }
}

/// Whether `import` treats a file as audio.
pub(crate) fn is_audio(path: &Path) -> bool {
    content_type(path) != "application/octet-stream"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audio_types_follow_the_contract() {
        let cases = [
            ("a.mp3", "audio/mpeg"),
            ("a.MP3", "audio/mpeg"),
            ("a.m4a", "audio/mp4"),
            ("a.mp4", "audio/mp4"),
            ("a.aac", "audio/aac"),
            ("a.flac", "audio/flac"),
            ("a.ogg", "audio/ogg"),
            ("a.oga", "audio/ogg"),
            ("a.opus", "audio/ogg; codecs=opus"),
            ("a.wav", "audio/wav"),
            ("a.webm", "audio/webm"),
            ("a.aiff", "audio/aiff"),
            ("a.AIF", "audio/aiff"),
            ("a.wv", "audio/x-wavpack"),
            ("a.ape", "audio/x-ape"),
            ("a.dsf", "audio/x-dsf"),
            ("a.dff", "audio/x-dff"),
            ("a.mka", "audio/matroska"),
            ("a.caf", "audio/x-caf"),
            ("a.spx", "audio/ogg; codecs=speex"),
            ("a.mid", "audio/midi"),
            ("a.midi", "audio/midi"),
            ("a.amr", "audio/amr"),
            ("a.3gp", "audio/3gpp"),
            ("a.ac3", "audio/ac3"),
            ("a.txt", "application/octet-stream"),
            ("noext", "application/octet-stream"),
        ];
        for (name, expected) in cases {
            assert_eq!(content_type(Path::new(name)), expected, "{name}");
        }
    }

    /// Every extension the table types is one `verify` can check by content, and back.
    #[test]
    fn every_audio_extension_has_a_format_to_sniff() {
        for ext in [
            "mp3", "m4a", "mp4", "m4b", "aac", "flac", "ogg", "oga", "opus", "wav", "webm", "weba",
            "aiff", "aif", "aifc", "wv", "ape", "dsf", "dff", "mka", "caf", "spx", "mid", "midi",
            "amr", "3gp", "ac3",
        ] {
            let name = format!("a.{ext}");
            assert!(is_audio(Path::new(&name)), "{ext} typed");
            assert!(
                super::super::probe::Format::of_extension(ext).is_some(),
                "{ext} sniffed"
            );
        }
    }
}
