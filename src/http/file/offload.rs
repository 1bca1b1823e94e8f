//! Offload answers: an empty 200 telling the front server which file to send
//! (`X-Accel-Redirect` for nginx, `X-Sendfile` for Apache and lighttpd).

use axum::http::{HeaderMap, HeaderValue, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::FileSettings;
use super::facts::content_disposition;
use crate::config::ServeMode;
use crate::media::MediaFile;
use crate::media::mime::content_type;

/// Characters left as they are in the offload URI: unreserved ones and `/`.
const OFFLOAD_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The headers of an offload answer for `media`, to play it or to save it (`download`).
pub(crate) fn headers(
    settings: &FileSettings,
    media: &MediaFile,
    download: bool,
) -> std::io::Result<HeaderMap> {
    let value = |text: &str| HeaderValue::from_str(text).map_err(std::io::Error::other);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&media.path)),
    );
    headers.insert(header::CACHE_CONTROL, settings.cache_control.clone());
    headers.insert(
        header::CONTENT_DISPOSITION,
        value(&content_disposition(&media.path, download))?,
    );
    if let Some(pacing) = settings.pacing
        && settings.mode == ServeMode::XAccelRedirect
    {
        // nginx paces what it sends (limit_rate_after is nginx's own setting there).
        headers.insert(
            "x-accel-limit-rate",
            HeaderValue::from(pacing.rate_bytes_per_sec.get()),
        );
    }
    match settings.mode {
        ServeMode::XSendfile => {
            // A path that is not a valid header value (a control character) is refused
            // rather than sent mangled.
            headers.insert("x-sendfile", value(&media.path.display().to_string())?);
        }
        _ => {
            let relative = settings
                .roots
                .relative(media)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let uri = format!(
                "{}/{}/{}",
                settings.accel_location,
                media.root_index,
                utf8_percent_encode(&relative, OFFLOAD_KEEP)
            );
            headers.insert("x-accel-redirect", value(&uri)?);
        }
    }
    Ok(headers)
}
