//! `musicctl sign`: a signed, expiring URL for a track, as the server checks it
//! ([`crate::signing`]).

use mongodb::bson::oid::ObjectId;

use super::AdminError;
use crate::config::Config;
use crate::signing::Signing;
use crate::timing::unix_secs;

/// A signed URL for `id`, valid for `ttl_secs`, signed with `kid` (or the first key), under
/// `base` (default: `http://{listen}`) and the first route prefix.
pub fn signed_url(
    config: &Config,
    id: &str,
    ttl_secs: u64,
    kid: Option<&str>,
    base: Option<&str>,
    name: Option<&str>,
) -> Result<String, AdminError> {
    let oid = ObjectId::parse_str(id)
        .map_err(|_| AdminError::Usage(format!("`{id}` is not a 24-digit hex ObjectId")))?;
    let signing = Signing::from_config(&config.signing);
    let key = signing.key(kid).ok_or_else(|| {
        AdminError::Usage(match kid {
            Some(kid) => format!("no signing key `{kid}` in [signing] keys"),
            None => "no signing key in [signing] keys".into(),
        })
    })?;
    let expires = unix_secs().saturating_add(ttl_secs);
    let sig = key.sign(&oid, expires);
    let base = base.map_or_else(
        || format!("http://{}", config.listen),
        |b| b.trim_end_matches('/').to_string(),
    );
    let prefix = config.track_prefix();
    let name = name.map(|n| format!("/{n}")).unwrap_or_default();
    Ok(format!(
        "{base}{prefix}/{}{name}?expires={expires}&kid={}&sig={sig}",
        oid.to_hex(),
        key.id
    ))
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
