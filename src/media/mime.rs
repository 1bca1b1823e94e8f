//! Content types by file extension, with the audio types players rely on.

use std::path::Path;

/// The `Content-Type` for a file, by its extension (case-insensitive).
pub fn content_type(path: &Path) -> &'static str {
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
        _ => "application/octet-stream",
    }
}

/// Whether `import` treats a file as audio.
pub fn is_audio(path: &Path) -> bool {
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
            ("a.txt", "application/octet-stream"),
            ("noext", "application/octet-stream"),
        ];
        for (name, expected) in cases {
            assert_eq!(content_type(Path::new(name)), expected, "{name}");
        }
    }
}
