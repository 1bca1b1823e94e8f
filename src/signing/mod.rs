//! Signed, expiring track links: the algorithm, shared by the server (which checks them,
//! in `http::track`) and `musicctl sign` (which makes them).
//!
//! A signed URL is the track URL plus `?expires=UNIX_SECONDS&kid=KEY_ID&sig=SIG`, where
//! `SIG` is the unpadded base64url HMAC-SHA256, under the key `kid`, of
//! `"{objectid in lowercase hex}\n{expires}"`. The `{name}` segment is not signed (it is
//! cosmetic, a client may rename the link). The check runs before any Redis or MongoDB
//! lookup and compares in constant time (`hmac`'s `verify_slice`). Several keys may be
//! configured at once, so a key can be rotated: sign with the new one, keep the old one
//! until its links have expired.
//!
//! A link may also name its listener ([`Binding`]): `sid=SESSION` and `ip=ADDR|CIDR`
//! join the query, and the signed message becomes
//! `"v2\n{objectid}\n{expires}\n{sid}\n{ip}"` (each empty when absent). The version is in
//! the message, not in a parameter: a v1 message starts with a hex digit, so no link of
//! one kind verifies as the other, and links made before stay valid exactly as they were.
//! An `ip` binding is checked against the client musicd derives behind its trusted
//! proxies (an IPv6 address binds its /64: mobile networks change the rest); a session or
//! a key can be revoked everywhere at once ([`revoked`]).
//!
//! Without a binding, a signed link is a bearer token: whoever holds it plays the track
//! until it expires.

#[doc(hidden)]
pub mod cost;
pub(crate) mod revoked;

use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use ipnet::IpNet;
use mongodb::bson::oid::ObjectId;
use sha2::Sha256;

pub(crate) use revoked::Revoked;

/// Why a link is refused (each a 403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureError {
    /// Missing (when required), malformed or wrong.
    #[error("invalid signature")]
    Invalid,
    /// Signed correctly, but `expires` has passed.
    #[error("link expired")]
    Expired,
    /// Signed with a key musicd does not have.
    #[error("unknown signing key")]
    UnknownKey,
    /// Its session or its key was revoked.
    #[error("link revoked")]
    Revoked,
    /// Bound to an address, and the client is elsewhere.
    #[error("link bound to another address")]
    WrongAddress,
    /// Its `ip` is neither an address nor a network.
    #[error("invalid ip binding")]
    BadAddress,
    /// Its `sid` is not a session id ([`valid_session`]).
    #[error("invalid session id")]
    BadSession,
    /// Bound to a session but valid for longer than a revocation lasts: revoking it could
    /// not cover its whole life.
    #[error("link outlives revocation")]
    TooLong,
}

impl SignatureError {
    /// What the client is told.
    pub(crate) fn message(&self) -> &'static str {
        match self {
            SignatureError::Invalid => "invalid signature",
            SignatureError::Expired => "link expired",
            SignatureError::UnknownKey => "unknown signing key",
            SignatureError::Revoked => "link revoked",
            SignatureError::WrongAddress => "link bound to another address",
            SignatureError::BadAddress => "invalid ip binding",
            SignatureError::BadSession => "invalid session id",
            SignatureError::TooLong => "link outlives revocation",
        }
    }
}

/// The signature parameters of a request's query, as received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LinkParams {
    pub(crate) expires: Option<String>,
    pub(crate) kid: Option<String>,
    pub(crate) sig: Option<String>,
    /// The session the link was made for.
    pub(crate) sid: Option<String>,
    /// The address or network the link was made for.
    pub(crate) ip: Option<String>,
}

impl LinkParams {
    /// Whether the request carries any signature parameter.
    pub(crate) fn present(&self) -> bool {
        self.expires.is_some()
            || self.kid.is_some()
            || self.sig.is_some()
            || self.sid.is_some()
            || self.ip.is_some()
    }

    /// Its binding, when it names a session or an address.
    fn binding(&self) -> Option<Binding<'_>> {
        (self.sid.is_some() || self.ip.is_some()).then_some(Binding {
            sid: self.sid.as_deref(),
            ip: self.ip.as_deref(),
        })
    }
}

/// Whom a link is for: a session, an address or network, or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The session id (`sid`).
    pub sid: Option<&'a str>,
    /// The address or CIDR network (`ip`), as written in the link.
    pub ip: Option<&'a str>,
}

/// A session id: 1 to 128 of the characters a URL carries unescaped (`A-Z a-z 0-9 - . _
/// ~`), so the id in a link, in a log and in a cache's ban is the same text.
pub fn valid_session(sid: &str) -> bool {
    (1..=128).contains(&sid.len())
        && sid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// The network an `ip` binding covers: a CIDR network as written; one IPv4 address alone;
/// one IPv6 address's /64 (a mobile client keeps its prefix and changes the rest).
pub fn bound_network(ip: &str) -> Option<IpNet> {
    if let Ok(net) = ip.parse::<IpNet>() {
        return Some(net.trunc());
    }
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => IpNet::new(IpAddr::V4(v4), 32).ok(),
        IpAddr::V6(v6) => IpNet::new(IpAddr::V6(v6), 64).ok().map(|net| net.trunc()),
    }
}

/// An IPv4 address as itself, whether it came as one or mapped into IPv6.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// One signing key.
#[derive(Clone)]
pub struct SigningKey {
    /// Its id (`kid`).
    pub(crate) id: String,
    /// HMAC keyed once: each check clones it instead of hashing the key's pads again
    /// (two of the four SHA-256 blocks a short link costs).
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "SigningKey({})", self.id)
    }
}

impl SigningKey {
    /// A key with this id and secret.
    pub fn new(id: impl Into<String>, secret: Vec<u8>) -> SigningKey {
        // HMAC takes a key of any length: this cannot fail.
        let keyed = <Hmac<Sha256> as KeyInit>::new_from_slice(&secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        SigningKey {
            id: id.into(),
            keyed,
        }
    }

    fn mac(&self, id: &ObjectId, expires: &str, binding: Option<Binding<'_>>) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        if binding.is_some() {
            mac.update(b"v2\n");
        }
        mac.update(id.to_hex().as_bytes());
        mac.update(b"\n");
        mac.update(expires.as_bytes());
        if let Some(binding) = binding {
            mac.update(b"\n");
            mac.update(binding.sid.unwrap_or("").as_bytes());
            mac.update(b"\n");
            mac.update(binding.ip.unwrap_or("").as_bytes());
        }
        mac
    }

    /// The `sig` of a link to `id` valid until `expires` (Unix seconds).
    pub fn sign(&self, id: &ObjectId, expires: u64) -> String {
        self.sign_bound(id, expires, Binding::default())
    }

    /// The `sig` of a link to `id` valid until `expires` for `binding` (a plain link when
    /// it names neither a session nor an address).
    pub fn sign_bound(&self, id: &ObjectId, expires: u64, binding: Binding<'_>) -> String {
        let binding = (binding.sid.is_some() || binding.ip.is_some()).then_some(binding);
        let tag = self
            .mac(id, &expires.to_string(), binding)
            .finalize()
            .into_bytes();
        URL_SAFE_NO_PAD.encode(tag)
    }
}

/// The configured keys, whether every track request must be signed, and what was
/// revoked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Signing {
    /// Unsigned track requests are refused.
    pub(crate) required: bool,
    /// The keys, any of which may have signed a link.
    pub(crate) keys: Vec<SigningKey>,
    /// How long a revocation lasts unless told otherwise, seconds; a session-bound link
    /// may not live longer, so a revocation always covers it to its end.
    pub(crate) revocation_ttl: u64,
    /// The sessions and keys revoked, as every musicd hears them.
    pub(crate) revoked: std::sync::Arc<Revoked>,
}

impl Signing {
    /// The keys and policy of the `[signing]` table.
    pub(crate) fn from_config(config: &crate::config::SigningConfig) -> Signing {
        Signing {
            required: config.required,
            keys: config
                .keys
                .iter()
                .map(|(id, secret)| SigningKey::new(id.clone(), secret.clone()))
                .collect(),
            revocation_ttl: config.revocation_ttl.as_secs(),
            revoked: std::sync::Arc::default(),
        }
    }

    /// Checks the link parameters of a request for `id` at `now` (Unix seconds), coming
    /// from `client` (asked only of a link bound to an address). Without any parameter,
    /// the request passes unless signing is required; a signature that is present is
    /// always checked, then its expiry, its revocation and its binding.
    pub(crate) fn check(
        &self,
        id: &ObjectId,
        params: &LinkParams,
        now: u64,
        client: impl FnOnce() -> IpAddr,
    ) -> Result<(), SignatureError> {
        if !params.present() {
            return if self.required {
                Err(SignatureError::Invalid)
            } else {
                Ok(())
            };
        }
        let (Some(expires), Some(kid), Some(sig)) = (&params.expires, &params.kid, &params.sig)
        else {
            return Err(SignatureError::Invalid);
        };
        let key = self
            .keys
            .iter()
            .find(|key| key.id == *kid)
            .ok_or(SignatureError::UnknownKey)?;
        // Only a canonical number was signed: "+5" or "05" would be another message.
        let when: u64 = expires
            .parse()
            .ok()
            .filter(|_| !expires.starts_with(['+', '0']) || expires == "0")
            .ok_or(SignatureError::Invalid)?;
        let tag = URL_SAFE_NO_PAD
            .decode(sig.as_bytes())
            .map_err(|_| SignatureError::Invalid)?;
        let binding = params.binding();
        key.mac(id, expires, binding)
            .verify_slice(&tag)
            .map_err(|_| SignatureError::Invalid)?;
        if when < now {
            return Err(SignatureError::Expired);
        }
        if self.revoked.key_revoked(kid, now) {
            return Err(SignatureError::Revoked);
        }
        let Some(binding) = binding else {
            return Ok(());
        };
        if let Some(sid) = binding.sid {
            if !valid_session(sid) {
                return Err(SignatureError::BadSession);
            }
            if when > now.saturating_add(self.revocation_ttl) {
                return Err(SignatureError::TooLong);
            }
            if self.revoked.session_revoked(sid, now) {
                return Err(SignatureError::Revoked);
            }
        }
        if let Some(ip) = binding.ip {
            let network = bound_network(ip).ok_or(SignatureError::BadAddress)?;
            if !network.contains(&canonical(client())) {
                return Err(SignatureError::WrongAddress);
            }
        }
        Ok(())
    }

    /// The key to sign with: `kid`, or the first one.
    pub(crate) fn key(&self, kid: Option<&str>) -> Option<&SigningKey> {
        match kid {
            Some(kid) => self.keys.iter().find(|key| key.id == kid),
            None => self.keys.first(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signing(required: bool) -> Signing {
        Signing {
            required,
            keys: vec![
                SigningKey::new("k1", b"first secret".to_vec()),
                SigningKey::new("k2", b"second secret".to_vec()),
            ],
            revocation_ttl: 30 * 86_400,
            revoked: std::sync::Arc::default(),
        }
    }

    fn params(expires: u64, kid: &str, sig: &str) -> LinkParams {
        LinkParams {
            expires: Some(expires.to_string()),
            kid: Some(kid.into()),
            sig: Some(sig.into()),
            ..LinkParams::default()
        }
    }

    fn anywhere() -> IpAddr {
        IpAddr::from([192, 0, 2, 1])
    }

    impl Signing {
        fn check_at(
            &self,
            id: &ObjectId,
            params: &LinkParams,
            now: u64,
        ) -> Result<(), SignatureError> {
            self.check(id, params, now, anywhere)
        }
    }

    #[test]
    fn a_link_signed_by_any_key_passes_until_it_expires() {
        let id = ObjectId::parse_str("6b0dc37d3ba0d873deac9381").expect("id");
        let s = signing(true);
        for key in &s.keys {
            let sig = key.sign(&id, 2_000);
            assert_eq!(
                s.check_at(&id, &params(2_000, &key.id, &sig), 1_000),
                Ok(())
            );
            assert_eq!(
                s.check_at(&id, &params(2_000, &key.id, &sig), 2_001),
                Err(SignatureError::Expired)
            );
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let id = ObjectId::parse_str("6b0dc37d3ba0d873deac9381").expect("id");
        let other = ObjectId::parse_str("6b0dc37d3ba0d873deac9382").expect("id");
        let s = signing(true);
        let sig = s.keys[0].sign(&id, 2_000);
        let check = |id: &ObjectId, p: LinkParams| s.check_at(id, &p, 1_000);
        assert_eq!(
            check(&id, LinkParams::default()),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            check(&other, params(2_000, "k1", &sig)),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            check(&id, params(2_001, "k1", &sig)),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            check(&id, params(2_000, "k2", &sig)),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            check(&id, params(2_000, "k9", &sig)),
            Err(SignatureError::UnknownKey)
        );
        assert_eq!(
            check(&id, params(2_000, "k1", "not base64!")),
            Err(SignatureError::Invalid)
        );
        let mut padded = params(2_000, "k1", &sig);
        padded.expires = Some("02000".into());
        assert_eq!(check(&id, padded), Err(SignatureError::Invalid));
        let partial = LinkParams {
            sig: Some(sig.clone()),
            ..LinkParams::default()
        };
        assert_eq!(check(&id, partial), Err(SignatureError::Invalid));
        // Not required: unsigned passes, a wrong signature still does not.
        let optional = signing(false);
        assert_eq!(
            optional.check_at(&id, &LinkParams::default(), 1_000),
            Ok(())
        );
        assert_eq!(
            optional.check_at(&id, &params(2_000, "k1", "AAAA"), 1_000),
            Err(SignatureError::Invalid)
        );
    }

    fn bound(sid: Option<&str>, ip: Option<&str>, s: &Signing, id: &ObjectId) -> LinkParams {
        let sig = s.keys[0].sign_bound(id, 2_000, Binding { sid, ip });
        LinkParams {
            sid: sid.map(str::to_string),
            ip: ip.map(str::to_string),
            ..params(2_000, "k1", &sig)
        }
    }

    #[test]
    fn a_bound_link_verifies_only_with_its_binding_and_from_its_address() {
        let id = ObjectId::parse_str("6b0dc37d3ba0d873deac9381").expect("id");
        let s = signing(true);
        let at = |ip: &'static str| move || ip.parse::<IpAddr>().expect("ip");
        let link = bound(Some("user-42.a"), Some("203.0.113.7"), &s, &id);
        assert_eq!(s.check(&id, &link, 1_000, at("203.0.113.7")), Ok(()));
        assert_eq!(s.check(&id, &link, 1_000, at("::ffff:203.0.113.7")), Ok(()));
        assert_eq!(
            s.check(&id, &link, 1_000, at("203.0.113.8")),
            Err(SignatureError::WrongAddress)
        );
        // Stripped, changed or added bindings break the signature.
        for (sid, ip) in [
            (None, None),
            (Some("user-43"), Some("203.0.113.7")),
            (Some("user-42.a"), None),
            (Some("user-42.a"), Some("203.0.113.0/24")),
        ] {
            let tampered = LinkParams {
                sid: sid.map(str::to_string),
                ip: ip.map(str::to_string),
                ..link.clone()
            };
            assert_eq!(
                s.check(&id, &tampered, 1_000, at("203.0.113.7")),
                Err(SignatureError::Invalid),
                "{sid:?} {ip:?}"
            );
        }
        let plain = params(2_000, "k1", &s.keys[0].sign(&id, 2_000));
        let added = LinkParams {
            sid: Some("someone".into()),
            ..plain.clone()
        };
        assert_eq!(s.check_at(&id, &added, 1_000), Err(SignatureError::Invalid));
        assert_eq!(s.check_at(&id, &plain, 1_000), Ok(()));
    }

    #[test]
    fn an_ipv6_address_binds_its_64_and_a_network_binds_itself() {
        let id = ObjectId::parse_str("6b0dc37d3ba0d873deac9381").expect("id");
        let s = signing(true);
        let at = |ip: &'static str| move || ip.parse::<IpAddr>().expect("ip");
        let v6 = bound(None, Some("2001:db8:1:2::a"), &s, &id);
        assert_eq!(s.check(&id, &v6, 1_000, at("2001:db8:1:2:ffff::9")), Ok(()));
        assert_eq!(
            s.check(&id, &v6, 1_000, at("2001:db8:1:3::a")),
            Err(SignatureError::WrongAddress)
        );
        let net = bound(None, Some("198.51.100.0/24"), &s, &id);
        assert_eq!(s.check(&id, &net, 1_000, at("198.51.100.200")), Ok(()));
        assert_eq!(
            s.check(&id, &net, 1_000, at("198.51.101.1")),
            Err(SignatureError::WrongAddress)
        );
        let bad = bound(None, Some("198.51.100.0/33"), &s, &id);
        assert_eq!(
            s.check_at(&id, &bad, 1_000),
            Err(SignatureError::BadAddress)
        );
        let bad_sid = bound(Some("a b"), None, &s, &id);
        assert_eq!(
            s.check_at(&id, &bad_sid, 1_000),
            Err(SignatureError::BadSession)
        );
    }

    #[test]
    fn a_revoked_session_or_key_is_refused_and_a_session_link_lives_no_longer_than_a_revocation() {
        let id = ObjectId::parse_str("6b0dc37d3ba0d873deac9381").expect("id");
        let s = signing(true);
        let link = bound(Some("sess-1"), None, &s, &id);
        assert_eq!(s.check_at(&id, &link, 1_000), Ok(()));
        s.revoked.apply("revoke sid:sess-1 1500");
        assert_eq!(s.check_at(&id, &link, 1_000), Err(SignatureError::Revoked));
        // The revocation ended.
        assert_eq!(s.check_at(&id, &link, 1_600), Ok(()));
        s.revoked.apply("unrevoke sid:sess-1");
        assert_eq!(s.check_at(&id, &link, 1_000), Ok(()));
        let plain = params(2_000, "k1", &s.keys[0].sign(&id, 2_000));
        s.revoked.apply("revoke kid:k1 5000");
        assert_eq!(s.check_at(&id, &plain, 1_000), Err(SignatureError::Revoked));
        let short = Signing {
            revocation_ttl: 500,
            ..signing(true)
        };
        let long = bound(Some("sess-2"), None, &short, &id);
        assert_eq!(
            short.check_at(&id, &long, 1_000),
            Err(SignatureError::TooLong)
        );
    }
}
