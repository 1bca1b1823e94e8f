//! The PROXY protocol header (v1 text or v2 binary) a load balancer sends before the
//! first request (varnish's `.proxy_header`, haproxy's `send-proxy`, nginx `stream`'s
//! `proxy_protocol on`): it names the client the balancer accepted. Parsed with the `ppp`
//! crate. With `proxy_protocol = true` a connection must start with one; one that does not
//! is closed.

use std::net::IpAddr;

use ppp::{HeaderResult, PartialResult};

/// Longest header accepted (v2 carries TLVs).
pub(crate) const MAX_HEADER: usize = 4096;

/// Longest v1 (text) header, CRLF included.
const MAX_V1: usize = 107;

/// What the start of a connection holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Proxied {
    /// A header of `len` bytes; `source` is the client (`None` for a balancer's own
    /// health check, `LOCAL`/`UNKNOWN`: the peer is the client then).
    Header {
        /// The client the balancer accepted.
        source: Option<IpAddr>,
        /// Bytes the header took.
        len: usize,
    },
    /// Not all there yet.
    Incomplete,
    /// Not a PROXY header.
    Invalid,
}

/// Reads a PROXY header at the start of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Proxied {
    let result = HeaderResult::parse(buf);
    if result.is_incomplete() {
        // A text header ends at its CRLF: one that is still "incomplete" there (missing
        // fields) is malformed, as is one longer than the protocol allows.
        let text_line = buf.starts_with(b"PROXY");
        let ended = buf[..buf.len().min(MAX_V1)]
            .windows(2)
            .any(|w| w == b"\r\n");
        return if buf.len() > MAX_HEADER || (text_line && (ended || buf.len() > MAX_V1)) {
            Proxied::Invalid
        } else {
            Proxied::Incomplete
        };
    }
    match result {
        HeaderResult::V1(Ok(header)) => {
            let source = match header.addresses {
                ppp::v1::Addresses::Tcp4(ip) => Some(IpAddr::V4(ip.source_address)),
                ppp::v1::Addresses::Tcp6(ip) => Some(IpAddr::V6(ip.source_address)),
                ppp::v1::Addresses::Unknown => None,
            };
            Proxied::Header {
                source,
                len: header.header.len(),
            }
        }
        HeaderResult::V2(Ok(header)) => {
            let source = match (header.command, header.addresses) {
                (ppp::v2::Command::Proxy, ppp::v2::Addresses::IPv4(ip)) => {
                    Some(IpAddr::V4(ip.source_address))
                }
                (ppp::v2::Command::Proxy, ppp::v2::Addresses::IPv6(ip)) => {
                    Some(IpAddr::V6(ip.source_address))
                }
                _ => None,
            };
            Proxied::Header {
                source,
                len: header.len(),
            }
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => Proxied::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_headers_name_the_client_and_their_length() {
        let v1 = b"PROXY TCP4 192.0.2.1 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(v1),
            Proxied::Header {
                source: Some("192.0.2.1".parse().expect("ip")),
                len: 40
            }
        );
        assert_eq!(parse(&v1[..20]), Proxied::Incomplete);
        let unknown = b"PROXY UNKNOWN\r\nGET";
        assert_eq!(
            parse(unknown),
            Proxied::Header {
                source: None,
                len: 15
            }
        );

        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        v2.extend_from_slice(&[0x21, 0x11, 0, 12]);
        v2.extend_from_slice(&[198, 51, 100, 7, 127, 0, 0, 1, 0x30, 0x39, 0, 80]);
        let len = v2.len();
        v2.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            parse(&v2),
            Proxied::Header {
                source: Some("198.51.100.7".parse().expect("ip")),
                len
            }
        );
        assert_eq!(parse(&v2[..14]), Proxied::Incomplete);
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            Proxied::Invalid
        );
        assert_eq!(parse(b"PROXY TCP4 nonsense\r\n"), Proxied::Invalid);
    }
}
