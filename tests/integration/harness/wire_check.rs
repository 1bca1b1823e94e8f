//! HTTP/1.1 on raw bytes, read strictly: the requests a byte stream holds and the
//! responses a server sent back. Shared by the conformance tests, the nginx differential
//! test and the connection fuzz target (which includes this file by path), so all three
//! hold the server to the same invariants:
//! * every response is well framed: never `Content-Length` and `Transfer-Encoding`
//!   together, never two lengths, a chunked body that decodes, nothing left over;
//! * a response to HEAD, a 1xx, 204 or 304 has no body;
//! * never more final responses than complete requests (plus one refusal).

// The fuzz target includes this file for `check_exchange` alone.
#![allow(dead_code)]

/// One response off the wire.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header fields as received.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// How many fields of this name.
    pub fn count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }

    /// Whether it is an interim (1xx) response.
    pub fn interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// The methods of the complete requests at the start of `input`, in order, read the way
/// a careful server frames them (Content-Length, or chunked alone). Scanning stops at the
/// first head or body that cannot be framed for sure: a server closes there.
pub fn request_methods(input: &[u8]) -> Vec<String> {
    framed_requests(input).0
}

/// [`request_methods`], and the bytes after the last framed request.
/// `input` with the version of its first line rewritten to `HTTP/1.1` when that line is a
/// request line for HTTP/1.2 to 1.9.
fn later_minor_as_11(input: &[u8]) -> Option<Vec<u8>> {
    let end = input.iter().position(|b| *b == b'\n')?;
    let line = input[..end].strip_suffix(b"\r").unwrap_or(&input[..end]);
    let at = line.len().checked_sub(8)?;
    let version = &line[at..];
    let later = version.starts_with(b"HTTP/1.") && (b'2'..=b'9').contains(&version[7]);
    let spaced = at > 0
        && line[at - 1] == b' '
        && line[..at - 1].iter().filter(|b| **b == b' ').count() == 1;
    (later && spaced).then(|| {
        let mut copy = input.to_vec();
        copy[at + 7] = b'1';
        copy
    })
}

fn framed_requests(input: &[u8]) -> (Vec<String>, &[u8]) {
    let mut methods = Vec::new();
    let mut rest = input;
    loop {
        let mut slots = [httparse::EMPTY_HEADER; 100];
        let mut request = httparse::Request::new(&mut slots);
        // A later 1.x minor is a request too, served as 1.1 (RFC 9110 §2.5); httparse
        // knows only 1.0 and 1.1, so it reads a copy that says 1.1 (same length).
        let as_11 = later_minor_as_11(rest);
        let view = as_11.as_deref().unwrap_or(rest);
        let Ok(httparse::Status::Complete(len)) = request.parse(view) else {
            return (methods, rest);
        };
        let method = request.method.unwrap_or_default().to_string();
        let mut length: Option<u64> = None;
        let mut chunked = false;
        for header in request.headers.iter() {
            if header.name.eq_ignore_ascii_case("content-length") {
                let Some(value) = std::str::from_utf8(header.value.trim_ascii())
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse().ok())
                else {
                    return (methods, rest);
                };
                if length.is_some_and(|l| l != value) {
                    return (methods, rest);
                }
                length = Some(value);
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                if chunked || !header.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                    return (methods, rest);
                }
                chunked = true;
            }
        }
        let body = &rest[len..];
        let after = if chunked {
            if length.is_some() {
                return (methods, rest);
            }
            match dechunk(body) {
                Ok(Some((_, used))) => &body[used..],
                _ => return (methods, rest),
            }
        } else {
            let length = length.and_then(|l| usize::try_from(l).ok()).unwrap_or(0);
            if body.len() < length {
                return (methods, rest);
            }
            &body[length..]
        };
        rest = after;
        methods.push(method);
    }
}

/// Reads every response in `bytes` (all a server sent until it closed). `is_head(i)` says
/// whether the i-th final response answers a HEAD. An error names the first violation; a
/// response cut short is one.
pub fn responses(bytes: &[u8], is_head: impl Fn(usize) -> bool) -> Result<Vec<Response>, String> {
    let (all, used) = leading_responses(bytes, is_head)?;
    if used < bytes.len() {
        return Err(format!(
            "a response is cut after {} complete ones: {:?}",
            all.len(),
            String::from_utf8_lossy(&bytes[used..bytes.len().min(used + 300)])
        ));
    }
    Ok(all)
}

/// The complete responses at the start of `bytes` and the bytes they took; what follows
/// may be the start of another. An error names the first violation.
pub fn leading_responses(
    bytes: &[u8],
    is_head: impl Fn(usize) -> bool,
) -> Result<(Vec<Response>, usize), String> {
    let mut out = Vec::new();
    let mut used = 0;
    let mut finals = 0;
    while used < bytes.len() {
        let Some((response, len)) = one_response(&bytes[used..], is_head(finals), out.len())?
        else {
            break;
        };
        if !response.interim() {
            finals += 1;
        }
        out.push(response);
        used += len;
    }
    Ok((out, used))
}

/// One response at the start of `rest`, and its length; `None` when it is not all there.
fn one_response(
    rest: &[u8],
    head: bool,
    index: usize,
) -> Result<Option<(Response, usize)>, String> {
    let mut slots = [httparse::EMPTY_HEADER; 100];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(rest) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(err) => {
            return Err(format!(
                "not a response ({err}) after {index} responses: {:?}",
                String::from_utf8_lossy(&rest[..rest.len().min(200)])
            ));
        }
    };
    let status = response.code.unwrap_or_default();
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let mut parsed = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let body = &rest[len..];
    let lengths = parsed.count("content-length");
    let chunked = parsed.count("transfer-encoding");
    if lengths > 0 && chunked > 0 {
        return Err(format!(
            "both Content-Length and Transfer-Encoding: {parsed:?}"
        ));
    }
    if lengths > 1 || chunked > 1 {
        return Err(format!("framing header twice: {parsed:?}"));
    }
    let interim = parsed.interim();
    if (interim || status == 204) && (lengths > 0 || chunked > 0) {
        return Err(format!("a {status} with framing: {parsed:?}"));
    }
    if interim || status == 204 || status == 304 || head {
        return Ok(Some((parsed, len)));
    }
    if let Some(length) = parsed.header("content-length") {
        let length: usize = length
            .trim()
            .parse()
            .map_err(|_| format!("bad Content-Length {length:?}"))?;
        if body.len() < length {
            return Ok(None);
        }
        parsed.body = body[..length].to_vec();
        return Ok(Some((parsed, len + length)));
    }
    if chunked > 0 {
        if !parsed
            .header("transfer-encoding")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"))
        {
            return Err(format!("a coding other than chunked: {parsed:?}"));
        }
        let Some((decoded, used)) = dechunk(body)? else {
            return Ok(None);
        };
        parsed.body = decoded;
        return Ok(Some((parsed, len + used)));
    }
    // Delimited by the close: only when the server says it closes.
    if !parsed
        .header("connection")
        .is_some_and(|v| v.to_ascii_lowercase().contains("close"))
    {
        return Err(format!("no framing on a keep-alive response: {parsed:?}"));
    }
    parsed.body = body.to_vec();
    Ok(Some((parsed, rest.len())))
}

/// The body of a chunked stream at the start of `bytes` and the bytes it took; `None`
/// when it is cut.
pub fn dechunk(bytes: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        if bytes.get(at).is_some_and(|b| !b.is_ascii_hexdigit()) {
            return Err("a chunk size that is not hex".into());
        }
        let size = match httparse::parse_chunk_size(&bytes[at..]) {
            Ok(httparse::Status::Complete((used, size))) => {
                at += used;
                size
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err("invalid chunk size".into()),
        };
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let Some(end) = bytes[at..].windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                at += end + 2;
                if end == 0 {
                    return Ok(Some((body, at)));
                }
            }
        }
        let size = usize::try_from(size).map_err(|_| "huge chunk".to_string())?;
        if bytes.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&bytes[at..at + size]);
        at += size;
        if &bytes[at..at + 2] != b"\r\n" {
            return Err("chunk data not followed by CRLF".into());
        }
        at += 2;
    }
}

/// Checks what a server sent for `input`: well framed, HEAD answers bodiless, and no more
/// final responses than complete requests plus one refusal. The final responses.
pub fn check_exchange(input: &[u8], output: &[u8]) -> Result<Vec<Response>, String> {
    let methods = request_methods(input);
    let head = |i: usize| {
        methods.get(i).is_some_and(|m| m == "HEAD")
        // A refused request is not in `methods`; the server reads its method as we do.
        || (i == methods.len() && refused_head(input))
    };
    let all = responses(output, head)?;
    let finals: Vec<Response> = all.into_iter().filter(|r| !r.interim()).collect();
    if finals.len() > methods.len() + 1 {
        return Err(format!(
            "{} responses to {} complete requests",
            finals.len(),
            methods.len()
        ));
    }
    Ok(finals)
}

/// The methods of every line of `input` that looks like a request line
/// (`METHOD target HTTP/x.y`), in order: what a lenient server (nginx skips malformed
/// field lines) may take for requests.
pub fn request_lines(input: &[u8]) -> Vec<String> {
    input
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
            let mut parts = line.split(' ');
            let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
            let plausible = parts.next().is_none()
                && !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_alphabetic())
                && !target.is_empty()
                && version.starts_with("HTTP/");
            plausible.then(|| method.to_ascii_uppercase())
        })
        .collect()
}

/// The differential check for a server that may read malformed input more leniently than
/// musicd: every response well framed, and no more final responses than request lines
/// sent (plus one refusal).
pub fn check_exchange_lenient(input: &[u8], output: &[u8]) -> Result<Vec<Response>, String> {
    let methods = request_lines(input);
    let all = responses(output, |i| methods.get(i).is_some_and(|m| m == "HEAD"))?;
    let finals: Vec<Response> = all.into_iter().filter(|r| !r.interim()).collect();
    if finals.len() > methods.len() + 1 {
        return Err(format!(
            "{} responses to {} request lines",
            finals.len(),
            methods.len()
        ));
    }
    Ok(finals)
}

/// Whether the request after the framed ones starts with `HEAD `.
fn refused_head(input: &[u8]) -> bool {
    let (_, rest) = framed_requests(input);
    let start = rest
        .iter()
        .position(|b| !b"\r\n".contains(b))
        .unwrap_or(rest.len());
    rest[start..].starts_with(b"HEAD ")
}
