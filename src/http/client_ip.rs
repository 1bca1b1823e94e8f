//! Who the client is: the connection's peer, or, when the peer is a trusted proxy, the
//! address that proxy says it forwarded for.
//!
//! `X-Forwarded-For` is read right to left, the way proxies append to it: every address
//! that is itself a trusted proxy is skipped, and the first one that is not is the client
//! (nginx's `real_ip_recursive on`). Anything to its left was written by the client and
//! is never believed. Without `X-Forwarded-For`, `X-Real-IP` is used. A peer that is not
//! trusted is the client whatever its headers say, so a forged header from the internet
//! changes nothing.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// The networks whose forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrustedProxies {
    networks: Vec<IpNet>,
}

impl TrustedProxies {
    /// Trusts these networks.
    pub(crate) fn new(networks: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies { networks }
    }

    /// Whether `ip` is a trusted proxy.
    pub(crate) fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.networks.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request that came from `peer` with these `X-Forwarded-For` lines
    /// (in the order received) and `X-Real-IP`.
    pub(crate) fn client(
        &self,
        peer: IpAddr,
        forwarded_for: &[&[u8]],
        real_ip: Option<&[u8]>,
    ) -> IpAddr {
        let peer = canonical(peer);
        // Without forwarding headers the peer is the client, trusted or not: most requests
        // skip the walk over the trusted networks.
        if (forwarded_for.is_empty() && real_ip.is_none()) || !self.trusts(peer) {
            return peer;
        }
        if forwarded_for.is_empty() {
            return real_ip.and_then(parse_address).unwrap_or(peer);
        }
        // The nearest address we can vouch for so far: the peer, then each trusted hop.
        let mut nearest = peer;
        for line in forwarded_for.iter().rev() {
            for item in line.rsplit(|b| *b == b',') {
                let item = item.trim_ascii();
                if item.is_empty() {
                    continue;
                }
                let Some(ip) = parse_address(item) else {
                    // Garbage in the chain: nothing to its left can be trusted.
                    return nearest;
                };
                if !self.trusts(ip) {
                    return ip;
                }
                nearest = ip;
            }
        }
        nearest
    }
}

/// The forwarding headers of a request head, as they are met: the last four
/// `X-Forwarded-For` lines (their right end is what trusted proxies wrote) and the first
/// `X-Real-IP`.
#[derive(Default)]
struct Forwarded<'h> {
    lines: [&'h [u8]; 4],
    count: usize,
    real_ip: Option<&'h [u8]>,
}

impl<'h> Forwarded<'h> {
    /// Notes a header (any other than a forwarding one is ignored).
    fn note(&mut self, name: &[u8], value: &'h [u8]) {
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            if self.count == self.lines.len() {
                self.lines.rotate_left(1);
                self.count -= 1;
            }
            self.lines[self.count] = value;
            self.count += 1;
        } else if name.eq_ignore_ascii_case(b"x-real-ip") {
            self.real_ip.get_or_insert(value);
        }
    }

    /// The client of a request from `peer` with these headers.
    fn client(&self, peer: IpAddr, proxies: &TrustedProxies) -> IpAddr {
        proxies.client(
            peer,
            &self.lines[..self.count],
            self.real_ip.filter(|ip| !ip.is_empty()),
        )
    }
}

impl TrustedProxies {
    /// The client of `request`: its peer, or whom trusted proxies forwarded it for.
    pub(crate) fn client_of(&self, request: &crate::http::service::Request<'_>) -> IpAddr {
        let mut forwarded = Forwarded::default();
        for (name, value) in request.headers() {
            forwarded.note(name, value);
        }
        forwarded.client(request.peer, self)
    }
}

/// An IPv4-mapped IPv6 address (from a dual-stack socket) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `1.2.3.4`, `2001:db8::1`, `1.2.3.4:5678` or `[2001:db8::1]:443`.
fn parse_address(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(list: &[&str]) -> TrustedProxies {
        TrustedProxies::new(list.iter().map(|n| n.parse().expect("cidr")).collect())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = proxies(&["10.0.0.0/8"]);
        assert_eq!(
            trusted.client(ip("203.0.113.9"), &[b"1.2.3.4"], Some(b"5.6.7.8")),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let trusted = proxies(&["127.0.0.1/32", "10.0.0.0/8", "::1/128"]);
        let local = ip("127.0.0.1");
        // The client forged "6.6.6.6"; nginx appended the real address, varnish its own.
        assert_eq!(
            trusted.client(local, &[b"6.6.6.6, 198.51.100.4, 10.1.2.3"], None),
            ip("198.51.100.4")
        );
        assert_eq!(
            trusted.client(local, &[b"6.6.6.6", b"198.51.100.4:5555"], None),
            ip("198.51.100.4")
        );
        assert_eq!(
            trusted.client(ip("::ffff:127.0.0.1"), &[b"[2001:db8::7]:443"], None),
            ip("2001:db8::7")
        );
        // Only proxies in the chain: the left-most of them.
        assert_eq!(
            trusted.client(local, &[b"10.9.9.9, 10.1.1.1"], None),
            ip("10.9.9.9")
        );
        // Garbage stops the walk at the nearest hop we can vouch for.
        assert_eq!(
            trusted.client(local, &[b"1.2.3.4, unknown, 10.1.1.1"], None),
            ip("10.1.1.1")
        );
        // No X-Forwarded-For: X-Real-IP, if it is an address.
        assert_eq!(
            trusted.client(local, &[], Some(b"192.0.2.1")),
            ip("192.0.2.1")
        );
        assert_eq!(trusted.client(local, &[], Some(b"nope")), local);
    }
}
