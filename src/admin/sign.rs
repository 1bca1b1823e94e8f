//! `musicctl sign`: a signed, expiring URL for a track, as the server checks it
//! ([`crate::signing`]).

use mongodb::bson::oid::ObjectId;

use super::AdminError;
use crate::config::Config;
use crate::signing::{Binding, Signing, bound_network, valid_session};
use crate::timing::unix_secs;

/// What a link is made for.
#[derive(Debug, Clone, Default)]
pub struct LinkOptions<'a> {
    /// How long it is valid, seconds.
    pub ttl_secs: u64,
    /// The key to sign with (default: the first).
    pub kid: Option<&'a str>,
    /// Scheme and host (default: `http://{listen}`).
    pub base: Option<&'a str>,
    /// A cosmetic file name to end the path with (not signed).
    pub name: Option<&'a str>,
    /// The session it is for.
    pub sid: Option<&'a str>,
    /// The address or network it is for.
    pub ip: Option<&'a str>,
}

/// A signed URL for `id` under the first route prefix, as `options` say.
pub fn signed_url(
    config: &Config,
    id: &str,
    options: &LinkOptions<'_>,
) -> Result<String, AdminError> {
    let oid = ObjectId::parse_str(id)
        .map_err(|_| AdminError::Usage(format!("`{id}` is not a 24-digit hex ObjectId")))?;
    let signing = Signing::from_config(&config.signing);
    let kid = options.kid;
    let key = signing.key(kid).ok_or_else(|| {
        AdminError::Usage(match kid {
            Some(kid) => format!("no signing key `{kid}` in [signing] keys"),
            None => "no signing key in [signing] keys".into(),
        })
    })?;
    if let Some(sid) = options.sid {
        if !valid_session(sid) {
            return Err(AdminError::Usage(format!(
                "`{sid}` is not a session id: 1 to 128 of A-Z a-z 0-9 - . _ ~"
            )));
        }
        // musicd refuses a session link that would outlive a revocation of its session.
        if options.ttl_secs > signing.revocation_ttl {
            return Err(AdminError::Usage(format!(
                "a session link may live at most signing.revocation_ttl ({} s), so that revoking its session covers it",
                signing.revocation_ttl
            )));
        }
    }
    if let Some(ip) = options.ip
        && bound_network(ip).is_none()
    {
        return Err(AdminError::Usage(format!(
            "`{ip}` is neither an address nor a CIDR network"
        )));
    }
    let expires = unix_secs().saturating_add(options.ttl_secs);
    let binding = Binding {
        sid: options.sid,
        ip: options.ip,
    };
    let sig = key.sign_bound(&oid, expires, binding);
    let base = options.base.map_or_else(
        || format!("http://{}", config.listen),
        |b| b.trim_end_matches('/').to_string(),
    );
    let prefix = config.track_prefix();
    let name = options.name.map(|n| format!("/{n}")).unwrap_or_default();
    let mut url = format!(
        "{base}{prefix}/{}{name}?expires={expires}&kid={}&sig={sig}",
        oid.to_hex(),
        key.id
    );
    if let Some(sid) = options.sid {
        url.push_str(&format!("&sid={sid}"));
    }
    if let Some(ip) = options.ip {
        // `/` and `:` are safe in a query; nothing else an address holds needs escaping.
        url.push_str(&format!("&ip={ip}"));
    }
    Ok(url)
}

/// `1h`, `30m`, `45s`, `2d` or plain seconds.
pub fn parse_ttl(text: &str) -> Result<u64, AdminError> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| AdminError::Usage(format!("`{text}` is not a duration like 1h or 300")))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(AdminError::Usage(format!(
                "`{text}`: the unit is s, m, h or d"
            )));
        }
    };
    Ok(n.saturating_mul(scale))
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_take_the_usual_units() {
        assert_eq!(parse_ttl("1h").ok(), Some(3600));
        assert_eq!(parse_ttl("30m").ok(), Some(1800));
        assert_eq!(parse_ttl("90").ok(), Some(90));
        assert_eq!(parse_ttl("2d").ok(), Some(172_800));
        assert!(parse_ttl("1w").is_err());
        assert!(parse_ttl("h").is_err());
    }
}
