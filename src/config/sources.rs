//! Where configuration comes from and how the layers merge: the TOML file, `MUSICD_*`
//! environment variables and `--set key=value` flags all become keys of one TOML table
//! before anything is deserialized.

use std::path::{Path, PathBuf};

use super::{ConfigError, DEFAULT_CONFIG_PATH};

/// Tables whose keys may be set from `MUSICD_<TABLE>_<KEY>`.
pub(super) const TABLES: &[&str] = &[
    "mongodb",
    "redis",
    "daemon",
    "cache",
    "limits",
    "access_log",
    "signing",
    "cors",
    "http_caches",
    "shutdown",
];

/// Where the configuration comes from; see [`super::Config::load`].
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// The TOML file. `None` means "the default path if it exists, else built-in defaults".
    pub file: Option<PathBuf>,
    /// Environment variables (normally `std::env::vars()`); only `MUSICD_*` ones are read.
    pub env: Vec<(String, String)>,
    /// `key=value` overrides from flags, applied last, e.g. `redis.url=redis://...`.
    pub overrides: Vec<String>,
}

impl Sources {
    /// Sources for a binary: the given file, the process environment, and flag overrides.
    pub(crate) fn from_process(file: Option<PathBuf>, overrides: Vec<String>) -> Self {
        Sources {
            file,
            env: std::env::vars().collect(),
            overrides,
        }
    }
}

/// Reads the file (or the default file if present) into a table.
pub(super) fn read_file(
    path: Option<&Path>,
) -> Result<(Option<PathBuf>, toml::Table), ConfigError> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG_PATH);
            if !default.exists() {
                return Ok((None, toml::Table::new()));
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let table = text
        .parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            path: path.clone(),
            message: e.to_string(),
        })?;
    Ok((Some(path), table))
}

/// `REDIS_TTL_SECS` -> `redis.ttl_secs`; `MEDIA_ROOTS` -> `media_roots`.
pub(super) fn env_key(rest: &str) -> String {
    let lower = rest.to_ascii_lowercase();
    for table in TABLES {
        if let Some(key) = lower.strip_prefix(&format!("{table}_")) {
            return format!("{table}.{key}");
        }
    }
    lower
}

/// Removes a dotted key from the table; whether it was there.
pub(super) fn remove_key(table: &mut toml::Table, key: &str) -> bool {
    let mut parts: Vec<&str> = key.split('.').collect();
    let Some(last) = parts.pop() else {
        return false;
    };
    let mut current = table;
    for part in parts {
        match current.get_mut(part).and_then(toml::Value::as_table_mut) {
            Some(next) => current = next,
            None => return false,
        }
    }
    current.remove(last).is_some()
}

/// Sets a dotted key in the table. The value is read as a TOML value when it is one
/// (`86400`, `true`, `["/a", "/b"]`, `"quoted"`), otherwise taken as a plain string, so
/// `MUSICD_REDIS_URL=redis://x` needs no quoting. A list-valued key also accepts a plain
/// `:`-separated string, like `PATH`.
pub(super) fn set_key(table: &mut toml::Table, key: &str, raw: &str) -> Result<(), String> {
    let mut value = parse_value(raw);
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{key}` is not a key"));
    }
    if matches!(key, "media_roots" | "route_prefixes")
        && let toml::Value::String(s) = &value
    {
        value = toml::Value::Array(
            s.split(':')
                .filter(|p| !p.is_empty())
                .map(|p| toml::Value::String(p.to_string()))
                .collect(),
        );
    }
    let (last, parents) = parts.split_last().ok_or("empty key")?;
    let mut current = table;
    for part in parents {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{part}` is not a table"))?;
    }
    current.insert(last.to_string(), value);
    Ok(())
}

pub(super) fn parse_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}
