//! Odd and hostile raw requests, shared by the conformance tests (which know what musicd
//! must answer to each) and the nginx differential test (which holds both paths to the
//! framing invariants).

/// A request that must be refused, the status it gets, and the request smuggled after it
/// that must never be answered.
pub struct Refused {
    /// What the vector is.
    pub name: &'static str,
    /// The bytes, the smuggled request included.
    pub input: Vec<u8>,
    /// The one status musicd answers.
    pub status: u16,
}

/// Appended to every refused vector: if it is ever answered, the framing was misread.
pub const SMUGGLED: &str = "GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n";

/// Request-smuggling vectors and malformed heads (RFC 9112 §2.2, §5, §6), each with the
/// status musicd refuses it with.
pub fn refused(track: &str) -> Vec<Refused> {
    let head = |lines: &str| format!("GET {track} HTTP/1.1\r\nHost: x\r\n{lines}\r\n");
    let body = "5\r\nhello\r\n0\r\n\r\n";
    let mut vectors: Vec<(&'static str, String, u16)> = vec![
        // Content-Length and Transfer-Encoding together (RFC 9112 §6.1).
        (
            "CL then TE",
            head("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n"),
            400,
        ),
        (
            "TE then CL",
            head("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n"),
            400,
        ),
        // Content-Length that is not one decimal number (§6.3).
        (
            "two lengths",
            head("Content-Length: 4\r\nContent-Length: 5\r\n"),
            400,
        ),
        ("length list", head("Content-Length: 4, 5\r\n"), 400),
        ("negative length", head("Content-Length: -4\r\n"), 400),
        ("hex length", head("Content-Length: 0x4\r\n"), 400),
        ("signed length", head("Content-Length: +4\r\n"), 400),
        ("spaced length", head("Content-Length: 4 4\r\n"), 400),
        ("empty length", head("Content-Length:\r\n"), 400),
        // Transfer-Encoding obfuscations.
        ("TE xchunked", head("Transfer-Encoding: xchunked\r\n"), 400),
        ("TE chunk", head("Transfer-Encoding: chunk\r\n"), 400),
        (
            "TE space before colon",
            head("Transfer-Encoding : chunked\r\n"),
            400,
        ),
        ("TE quoted", head("Transfer-Encoding: \"chunked\"\r\n"), 400),
        (
            "TE parameter",
            head("Transfer-Encoding: chunked;q=1\r\n"),
            400,
        ),
        (
            "TE twice in a list",
            head("Transfer-Encoding: chunked, chunked\r\n"),
            400,
        ),
        (
            "TE twice in lines",
            head("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
            400,
        ),
        (
            "TE chunked then other",
            head("Transfer-Encoding: chunked, identity\r\n"),
            400,
        ),
        (
            "TE other line after",
            head("Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n"),
            400,
        ),
        (
            "TE leading comma",
            head("Transfer-Encoding: ,chunked\r\n"),
            400,
        ),
        (
            "TE trailing comma",
            head("Transfer-Encoding: chunked,\r\n"),
            400,
        ),
        (
            "TE vertical tab",
            head("Transfer-Encoding: chunked\x0b\r\n"),
            400,
        ),
        ("TE folded", head("Transfer-Encoding:\r\n chunked\r\n"), 400),
        (
            "TE in HTTP/1.0",
            format!("GET {track} HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400,
        ),
        // Codings musicd does not implement, before chunked (§6.1: 501).
        ("TE gzip", head("Transfer-Encoding: gzip, chunked\r\n"), 501),
        (
            "TE identity",
            head("Transfer-Encoding: identity, chunked\r\n"),
            501,
        ),
        // Malformed field lines (§2.2, §5.1, §5.2).
        ("obs-fold", head("X-A: 1\r\n folded\r\n"), 400),
        ("bare CR", head("X-A: a\rb\r\n"), 400),
        ("NUL", head("X-A: a\0b\r\n"), 400),
        ("space before colon", head("X-A : 1\r\n"), 400),
        (
            "whitespace before the first field",
            format!("GET {track} HTTP/1.1\r\n Host: x\r\n\r\n"),
            400,
        ),
        ("no colon", head("X-A\r\n"), 400),
        // Host (§3.2).
        ("no Host", format!("GET {track} HTTP/1.1\r\n\r\n"), 400),
        ("two Hosts", head("Host: y\r\n"), 400),
        (
            "Host with a path",
            format!("GET {track} HTTP/1.1\r\nHost: x/y\r\n\r\n"),
            400,
        ),
        (
            "Host with userinfo",
            format!("GET {track} HTTP/1.1\r\nHost: u@x\r\n\r\n"),
            400,
        ),
        // Targets (§3.2).
        (
            "authority form",
            "GET x:80 HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            400,
        ),
        (
            "asterisk for GET",
            "GET * HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            400,
        ),
        (
            "relative target",
            "GET musicdb HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            400,
        ),
        // Versions (§2.3) and expectations (RFC 9110 §10.1.1).
        (
            "HTTP/2.0",
            format!("GET {track} HTTP/2.0\r\nHost: x\r\n\r\n"),
            505,
        ),
        // A later 1.x minor is served as 1.1 (RFC 9110 §2.5); a malformed version is 400.
        (
            "HTTP/1.32",
            format!("GET {track} HTTP/1.32\r\nHost: x\r\n\r\n"),
            400,
        ),
        (
            "fragment in the target",
            format!("GET {track}#t=10 HTTP/1.1\r\nHost: x\r\n\r\n"),
            400,
        ),
        ("unknown expectation", head("Expect: 200-ok\r\n"), 417),
        // Chunked bodies that cannot be framed (§7.1).
        (
            "empty chunk size",
            format!("{}\r\n\r\n", head("Transfer-Encoding: chunked\r\n")),
            400,
        ),
        (
            "chunk without CRLF",
            format!(
                "{}5\r\nhelloXX0\r\n\r\n",
                head("Transfer-Encoding: chunked\r\n")
            ),
            400,
        ),
        (
            "not HTTP",
            "\x16\x03\x01\x02\x00 hello\r\n\r\n".to_string(),
            400,
        ),
    ];
    for (_, input, _) in vectors.iter_mut() {
        // The body a chunked reading would take, then the smuggled request.
        if !input.contains("5\r\nhello") && !input.ends_with("\r\n\r\n\r\n") {
            input.push_str(body);
        }
        input.push_str(SMUGGLED);
    }
    vectors
        .into_iter()
        .map(|(name, input, status)| Refused {
            name,
            input: input.into_bytes(),
            status,
        })
        .collect()
}

/// Odd but valid requests: each must be answered, well framed.
pub fn odd(track: &str) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("absolute form", format!("GET http://elsewhere.example{track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("HEAD then GET", format!("HEAD {track} HTTP/1.1\r\nHost: x\r\n\r\nGET {track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("chunked body then GET", format!("GET {track} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: 1\r\n\r\nGET {track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("length body then GET", format!("GET {track} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET {track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("expect with body", format!("GET {track} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")),
        ("HTTP/1.0", format!("GET {track} HTTP/1.0\r\n\r\n")),
        ("range", format!("GET {track} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\nConnection: close\r\n\r\n")),
        ("multi range", format!("GET {track} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1, 5-6\r\nConnection: close\r\n\r\n")),
        ("leading empty line", format!("\r\nGET {track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("lower-case method", format!("get {track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("unknown method", format!("BREW {track} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
        ("POST", format!("POST {track} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")),
        ("OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string()),
        ("pipelined three", format!("GET {track} HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
    ]
    .into_iter()
    .map(|(name, input)| (name, input.into_bytes()))
    .collect()
}
