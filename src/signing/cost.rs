//! What checking a link costs, for `examples/link_check_cost.rs` (`bench/link_check.sh`):
//! a plain signed link beside one bound to a session, over a revocation set of any size,
//! through the same [`Signing::check`] a request takes. A measuring hook, not an
//! interface: hidden from the docs.

use std::net::{IpAddr, Ipv4Addr};

use mongodb::bson::oid::ObjectId;

use super::{Binding, LinkParams, Signing, SigningKey};

/// One key, one track, a plain link and a session-bound one, and `revoked` other sessions.
pub struct LinkCheckBench {
    signing: Signing,
    id: ObjectId,
    plain: LinkParams,
    bound: LinkParams,
    now: u64,
}

impl LinkCheckBench {
    /// The links, and a revocation set holding `revoked` sessions (none of them these).
    pub fn new(revoked: usize) -> LinkCheckBench {
        let key = SigningKey::new("k1", b"a secret of 32 bytes, as advised".to_vec());
        let now = 1_800_000_000;
        let expires = now + 3600;
        let id = ObjectId::from_bytes([
            0x6b, 0x0d, 0xc3, 0x7d, 0x3b, 0xa0, 0xd8, 0x73, 0xde, 0xac, 0x93, 0x81,
        ]);
        let sid = "u-4f2a9c1e77b3d501";
        let plain = LinkParams {
            expires: Some(expires.to_string()),
            kid: Some("k1".into()),
            sig: Some(key.sign(&id, expires)),
            sid: None,
            ip: None,
        };
        let binding = Binding {
            sid: Some(sid),
            ip: None,
        };
        let bound = LinkParams {
            sig: Some(key.sign_bound(&id, expires, binding)),
            sid: Some(sid.into()),
            ..plain.clone()
        };
        let signing = Signing {
            required: true,
            keys: vec![key],
            revocation_ttl: 30 * 86_400,
            revoked: std::sync::Arc::default(),
        };
        for n in 0..revoked {
            signing
                .revoked
                .apply(&format!("revoke sid:s{n:09} {}", now + 86_400));
        }
        LinkCheckBench {
            signing,
            id,
            plain,
            bound,
            now,
        }
    }

    /// Sessions in the revocation set.
    pub fn revoked(&self) -> usize {
        self.signing.revoked.sessions()
    }

    /// Checks the plain link; whether it passed.
    pub fn check_plain(&self) -> bool {
        self.signing
            .check(&self.id, &self.plain, self.now, client)
            .is_ok()
    }

    /// Checks the session-bound link; whether it passed.
    pub fn check_bound(&self) -> bool {
        self.signing
            .check(&self.id, &self.bound, self.now, client)
            .is_ok()
    }
}

/// Neither link names an address: never asked.
fn client() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}
