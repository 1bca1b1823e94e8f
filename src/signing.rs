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
//! A signed link is a bearer token: whoever holds it plays the track until it expires.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use mongodb::bson::oid::ObjectId;
use sha2::Sha256;

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
}

impl SignatureError {
    /// What the client is told.
    pub(crate) fn message(&self) -> &'static str {
        match self {
            SignatureError::Invalid => "invalid signature",
            SignatureError::Expired => "link expired",
            SignatureError::UnknownKey => "unknown signing key",
        }
    }
}

/// The signature parameters of a request's query, as received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LinkParams {
    pub(crate) expires: Option<String>,
    pub(crate) kid: Option<String>,
    pub(crate) sig: Option<String>,
}

impl LinkParams {
    /// Whether the request carries any signature parameter.
    pub(crate) fn present(&self) -> bool {
        self.expires.is_some() || self.kid.is_some() || self.sig.is_some()
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

    fn mac(&self, id: &ObjectId, expires: &str) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(id.to_hex().as_bytes());
        mac.update(b"\n");
        mac.update(expires.as_bytes());
        mac
    }

    /// The `sig` of a link to `id` valid until `expires` (Unix seconds).
    pub fn sign(&self, id: &ObjectId, expires: u64) -> String {
        let tag = self.mac(id, &expires.to_string()).finalize().into_bytes();
        URL_SAFE_NO_PAD.encode(tag)
    }
}

/// The configured keys and whether every track request must be signed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Signing {
    /// Unsigned track requests are refused.
    pub(crate) required: bool,
    /// The keys, any of which may have signed a link.
    pub(crate) keys: Vec<SigningKey>,
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
        }
    }

    /// Checks the link parameters of a request for `id` at `now` (Unix seconds). Without
    /// any parameter, the request passes unless signing is required; a signature that is
    /// present is always checked.
    pub(crate) fn check(
        &self,
        id: &ObjectId,
        params: &LinkParams,
        now: u64,
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
        key.mac(id, expires)
            .verify_slice(&tag)
            .map_err(|_| SignatureError::Invalid)?;
        if when < now {
            return Err(SignatureError::Expired);
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
        }
    }

    fn params(expires: u64, kid: &str, sig: &str) -> LinkParams {
        LinkParams {
            expires: Some(expires.to_string()),
            kid: Some(kid.into()),
            sig: Some(sig.into()),
        }
    }

    #[test]
    fn a_link_signed_by_any_key_passes_until_it_expires() {
        let id = ObjectId::parse_str("6b0dc37d3ba0d873deac9381").expect("id");
        let s = signing(true);
        for key in &s.keys {
            let sig = key.sign(&id, 2_000);
            assert_eq!(s.check(&id, &params(2_000, &key.id, &sig), 1_000), Ok(()));
            assert_eq!(
                s.check(&id, &params(2_000, &key.id, &sig), 2_001),
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
        let check = |id: &ObjectId, p: LinkParams| s.check(id, &p, 1_000);
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
        assert_eq!(optional.check(&id, &LinkParams::default(), 1_000), Ok(()));
        assert_eq!(
            optional.check(&id, &params(2_000, "k1", "AAAA"), 1_000),
            Err(SignatureError::Invalid)
        );
    }
}
