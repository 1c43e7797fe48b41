//! Who may use the API: tokens, inbound signing secrets and named sources.

use super::value::InvalidValue;
use std::time::Duration;

use figment::value::Value;
use secrecy::{ExposeSecret, SecretString};

use super::{declare::section, value::Setting};
use crate::credentials::{ApiToken, WebhookSecret};

section! {
    /// Who may use the API: tokens, inbound signing secrets and named sources.
    pub struct Security("security", heading "Security"), flags SecurityFlags {
        /// API tokens, comma-separated, each role:<sha256 hex of the token> with role ingest,
        /// moderator or admin.
        api_tokens: Vec<ApiToken> = Vec::new();
        /// Serve the API without API tokens and inbound signatures (local development only;
        /// `make run` uses it).
        insecure_dev: bool = false;
        /// Standard Webhooks secrets (whsec_<base64>, comma-separated; several for rotation)
        /// that POST /v1/events must be signed with; none: not checked.
        inbound_secrets: Vec<WebhookSecret> = Vec::new();
        /// GitHub-style secrets (comma-separated) for X-Hub-Signature-256 senders.
        inbound_github_secrets: Vec<SecretString> = Vec::new();
        /// Accepted difference between a signed request's timestamp and now, both ways.
        signature_tolerance: Duration = Duration::from_secs(300);
        /// Named webhook senders posting to /v1/sources/{name}/events: comma-separated
        /// name=whsec_<base64> or name=github:<secret>, a name repeated for rotation; in the file,
        /// [[sources]] tables with name, secrets, github_secrets, rate_limit and rate_burst.
        sources: Vec<Source> = Vec::new(), check distinct_names;
    }
}

impl Security {
    /// What `serve` needs before it exposes the API: tokens and inbound signing secrets, unless
    /// `insecure_dev` says otherwise.
    pub fn check_serving(&self) -> Result<(), InvalidValue> {
        if self.insecure_dev {
            return Ok(());
        }
        let mut missing = Vec::new();
        if self.api_tokens.is_empty() {
            missing.push(
                "QUIESCE_API_TOKENS (role:<sha256 hex of a token>, roles ingest, moderator, admin)",
            );
        }
        if self.inbound_secrets.is_empty()
            && self.inbound_github_secrets.is_empty()
            && self.sources.is_empty()
        {
            missing.push(
                "QUIESCE_INBOUND_SECRETS (whsec_<base64>), QUIESCE_INBOUND_GITHUB_SECRETS or QUIESCE_SOURCES",
            );
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "refusing to serve an open API: configure {}; or pass --insecure-dev for local development",
                missing.join(" and ")
            ).into())
        }
    }
}

/// A named webhook sender: its own secrets, and optionally its own rate.
#[derive(Debug, Clone)]
pub struct Source {
    /// Path segment of its endpoint: 1-64 of `a-z 0-9 - _`.
    pub name: String,
    /// Standard Webhooks secrets; several for rotation.
    pub secrets: Vec<WebhookSecret>,
    /// GitHub-style secrets for `X-Hub-Signature-256` senders.
    pub github_secrets: Vec<SecretString>,
    /// Events per second; `None`: the global `rate_limit`.
    pub rate_limit: Option<u32>,
    /// Burst; `None`: the global `rate_burst`.
    pub rate_burst: Option<u32>,
}

impl Source {
    /// A source signing with these Standard Webhooks secrets, at the global rate.
    pub fn new(name: &str, secrets: Vec<WebhookSecret>) -> Self {
        Self {
            name: name.to_owned(),
            secrets,
            github_secrets: Vec::new(),
            rate_limit: None,
            rate_burst: None,
        }
    }

    fn check(&self) -> Result<(), InvalidValue> {
        if !valid_name(&self.name) {
            // Not echoed: a secret pasted without `name=` would land here.
            return Err("a source name must be 1-64 of a-z, 0-9, - and _".into());
        }
        if self.secrets.is_empty() && self.github_secrets.is_empty() {
            return Err(format!(
                "source {} has no secret; every source must sign its requests",
                self.name
            )
            .into());
        }
        if self.rate_limit == Some(0) || self.rate_burst == Some(0) {
            return Err(format!(
                "source {}: rate_limit and rate_burst must be greater than zero",
                self.name
            )
            .into());
        }
        Ok(())
    }
}

/// 1-64 of `a-z 0-9 - _`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// How an error names a source: by its name if it is a valid one, else not at all (what stands
/// where the name should may be a secret).
fn label(name: &str) -> String {
    if valid_name(name) {
        format!("source {name}")
    } else {
        "a source with an invalid name".to_owned()
    }
}

/// One `[[sources]]` table of the config file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceTable {
    name: String,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    github_secrets: Vec<String>,
    #[serde(default)]
    rate_limit: Option<u32>,
    #[serde(default)]
    rate_burst: Option<u32>,
}

/// `name=whsec_...` or `name=github:<secret>`, comma-separated; a name given several times has
/// several secrets (rotation). Errors never echo an entry: it holds a secret.
fn sources_from_text(raw: &str) -> Result<Vec<Source>, InvalidValue> {
    let mut sources: Vec<Source> = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        // A secret's base64 may end in `=`: an entry whose part before the first `=` is no
        // valid name is refused without echoing it.
        let (name, secret) = entry
            .split_once('=')
            .filter(|(name, _)| valid_name(name))
            .ok_or("expected name=whsec_<base64> or name=github:<secret>, the name 1-64 of a-z, 0-9, - and _")?;
        let index = match sources.iter().position(|s| s.name == name) {
            Some(index) => index,
            None => {
                sources.push(Source::new(name, Vec::new()));
                sources.len() - 1
            }
        };
        let source = &mut sources[index];
        match secret.strip_prefix("github:") {
            Some(github) if !github.is_empty() => {
                source.github_secrets.push(SecretString::from(github))
            }
            Some(_) => return Err(format!("source {name}: the github secret is empty").into()),
            None => source.secrets.push(
                WebhookSecret::parse(secret)
                    .map_err(|reason| format!("source {name}: {reason}"))?,
            ),
        }
    }
    Ok(sources)
}

fn source_from_table(table: SourceTable) -> Result<Source, InvalidValue> {
    let secrets = table
        .secrets
        .iter()
        .map(|s| WebhookSecret::parse(s))
        .collect::<Result<_, _>>()
        .map_err(|reason| format!("{}: {reason}", label(&table.name)))?;
    Ok(Source {
        name: table.name,
        secrets,
        github_secrets: table
            .github_secrets
            .into_iter()
            .map(SecretString::from)
            .collect(),
        rate_limit: table.rate_limit,
        rate_burst: table.rate_burst,
    })
}

/// Names, secret counts and rates, never a secret.
impl Setting for Vec<Source> {
    const VALUE_NAME: &'static str = "SOURCES";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        let sources = match value {
            Value::String(_, raw) => sources_from_text(raw)?,
            Value::Array(..) => value
                .deserialize::<Vec<SourceTable>>()
                // Only the kind of problem: a value here may be a secret.
                .map_err(|e| match e.kind {
                    figment::error::Kind::UnknownField(field, _) => {
                        format!("a [[sources]] table has no key {field}")
                    }
                    figment::error::Kind::MissingField(field) => {
                        format!("a [[sources]] table needs {field}")
                    }
                    _ => "expected [[sources]] tables with name, secrets, github_secrets, rate_limit and rate_burst".to_owned(),
                })?
                .into_iter()
                .map(source_from_table)
                .collect::<Result<_, _>>()?,
            _ => return Err("expected name=whsec_<base64> pairs or [[sources]] tables".into()),
        };
        for source in &sources {
            source.check()?;
        }
        Ok(sources)
    }

    /// Per-source rates are not part of the variable's syntax: only the file has them.
    fn to_text(&self) -> Option<String> {
        let pairs: Vec<String> = self
            .iter()
            .flat_map(|source| {
                let standard = source
                    .secrets
                    .iter()
                    .map(|s| format!("{}={}", source.name, s.expose()));
                let github = source
                    .github_secrets
                    .iter()
                    .map(|s| format!("{}=github:{}", source.name, s.expose_secret()));
                standard.chain(github).collect::<Vec<_>>()
            })
            .collect();
        Some(pairs.join(","))
    }

    fn show(&self) -> String {
        if self.is_empty() {
            return "none".to_owned();
        }
        self.iter()
            .map(|s| {
                format!(
                    "{} ({} secrets, {} github secrets)",
                    s.name,
                    s.secrets.len(),
                    s.github_secrets.len()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn distinct_names(sources: &[Source]) -> Result<(), InvalidValue> {
    match sources
        .iter()
        .enumerate()
        .find(|(i, s)| sources[..*i].iter().any(|o| o.name == s.name))
    {
        Some((_, s)) => Err(format!(
            "source {} is configured twice; list all its secrets in one entry",
            s.name
        )
        .into()),
        None => Ok(()),
    }
}
