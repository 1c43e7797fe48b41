//! The audit trail as the edges use it: where a request came from, and recording a decision
//! that took effect. Decisions that change a row are recorded in the store's own transaction
//! (reversal, override, rules publish and rollback); [`record`] is for the others (a redrive, a
//! reload, a shard move, a sign-in), just after they took effect.

use std::net::SocketAddr;

use chrono::{DateTime, Utc};

use axum::{
    extract::{ConnectInfo, FromRequestParts},
    http::{Extensions, HeaderMap, request::Parts},
};

use crate::{
    domain::{Actor, AuditAction, AuditEntry},
    store::Store,
    telemetry::{Chain, names},
};

/// The longest `X-Forwarded-For` kept (it is the proxy's word, not checked).
const MAX_FORWARDED_FOR: usize = 200;

/// Where a request came from: the connection's peer address (the server puts it on every
/// request) and the proxy's `X-Forwarded-For`, as it said it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub address: Option<String>,
    pub forwarded_for: Option<String>,
}

impl Origin {
    pub fn of(headers: &HeaderMap, extensions: &Extensions) -> Self {
        let address = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| peer.ip().to_string());
        let forwarded_for = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(MAX_FORWARDED_FOR).collect::<String>())
            .filter(|v| !v.trim().is_empty());
        Self {
            address,
            forwarded_for,
        }
    }

    /// `name`, proved by `credential` (a token's label) in `role`, from here.
    pub fn actor(&self, name: &str, credential: Option<&str>, role: Option<&str>) -> Actor {
        Actor {
            name: name.to_owned(),
            credential: credential.map(str::to_owned),
            role: role.map(str::to_owned),
            address: self.address.clone(),
            forwarded_for: self.forwarded_for.clone(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Origin {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::of(&parts.headers, &parts.extensions))
    }
}

/// `since` as an RFC 3339 time, or as a duration back from now (`7d`, `24h`).
pub fn parse_since(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Ok(at.with_timezone(&Utc));
    }
    let back = humantime::parse_duration(raw.trim())
        .map_err(|_| "must be an RFC 3339 time or a duration such as 7d or 24h".to_owned())?;
    chrono::Duration::from_std(back)
        .ok()
        .and_then(|back| now.checked_sub_signed(back))
        .ok_or_else(|| "is too far back".to_owned())
}

/// The command line's actor: `cli:<the OS user>`, the password database's name for the
/// process's real uid (`cli:uid:<n>` when it has no entry). Not `$USER` or `$LOGNAME`: they
/// are unset under a service manager or in a container, and anyone can set them to any name.
pub fn command_line() -> Actor {
    let uid = nix::unistd::Uid::current();
    let user = match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => format!("uid:{uid}"),
    };
    Actor::named(format!("cli:{user}"), Some("cli"))
}

/// A reload: the active rules version read again from Postgres, from `before` (the rule count
/// and version in force) to `after`.
pub fn rules_reloaded(before: (usize, Option<i64>), after: (usize, Option<i64>)) -> AuditEntry {
    let state = |(rules, version): (usize, Option<i64>)| serde_json::json!({ "rules": rules, "version": version });
    AuditEntry {
        action: AuditAction::RulesReload,
        subject: "rules".into(),
        before: Some(state(before)),
        after: Some(state(after)),
    }
}

/// Records a decision that took effect. A failure is logged and counted, not returned: the
/// decision stands, and the caller has already told the user so.
pub async fn record(store: &Store, actor: &Actor, entry: AuditEntry) {
    if let Err(error) = store.audit().record_audit(actor, &entry).await {
        metrics::counter!(names::AUDIT_FAILURES).increment(1);
        tracing::error!(
            error = %Chain(&error),
            action = entry.action.as_str(),
            subject = %entry.subject,
            "could not record a decision in the audit trail"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_a_time_or_a_duration_back() {
        let now = Utc::now();
        assert_eq!(
            parse_since("2026-12-01T00:00:00Z", now)
                .unwrap()
                .to_rfc3339(),
            "2026-12-01T00:00:00+00:00"
        );
        assert_eq!(
            parse_since("7d", now).unwrap(),
            now - chrono::Duration::days(7)
        );
        assert!(
            parse_since("last week", now)
                .unwrap_err()
                .contains("duration")
        );
    }
}
