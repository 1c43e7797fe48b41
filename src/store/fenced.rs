//! The fenced statement: what a finished evaluation hands the store, and several of them
//! recorded behind the version fence in one statement, with their actions, outbox rows, labels
//! and statements of reasons, and the entities' bookkeeping (`evaluations.rs` says when it runs
//! and how rows held elsewhere are treated).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, types::Json};

use super::{Result, StoreError};
use crate::{
    domain::{EntityId, RulesActionApplied, Snapshot, StatementBody, Topic},
    rules::{Decision, Verdict},
};

/// What a completed evaluation wrote.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// No action was due; the evaluation is recorded.
    NoAction,
    /// The action was applied now, as this action row; `author` got a derived signal for it
    /// and must be scheduled.
    Applied {
        action_id: i64,
        author: Option<EntityId>,
    },
    /// The action's dedup key exists: it took effect before (a retry after a crash).
    AlreadyApplied,
}

/// One finished evaluation to record behind the version fence: what the rules saw and
/// decided, and the action to apply, if any. The worker hands it to the store as it is.
#[derive(Debug, Clone)]
pub struct FencedEvaluation {
    pub snapshot: Snapshot,
    pub verdict: Verdict,
    pub decision: Option<Decision>,
    pub started_at: DateTime<Utc>,
    /// When the claim was due, for the queue lag of the evaluation record.
    pub due_at: Option<DateTime<Utc>>,
    /// The `traceparent` of the span that applies an action, for its webhook.
    pub trace: Option<String>,
    /// The statement of reasons of a restricting decision, written with its action.
    pub statement: Option<crate::domain::StatementDraft>,
    /// The statements of the labels given that restrict, by label, each written with its label.
    pub label_statements: Vec<(String, crate::domain::StatementDraft)>,
}

/// The action a fenced evaluation writes: its rules' decision or, with none, the restore of
/// a timer that has ended (`domain/timer.rs`).
pub(super) struct Effect<'a> {
    pub action: &'a str,
    pub rule: &'a str,
    pub reason: String,
    pub new_status: &'static str,
    pub dedup_key: String,
    /// A timed action's length (seconds).
    pub duration: Option<f64>,
}

impl FencedEvaluation {
    /// The completion of this evaluation from what the fenced statement recorded for it
    /// (`None`: the version had moved and nothing was written).
    pub fn completion(&self, recorded: Option<&Recorded>) -> Result<Completion> {
        completion_of(&self.snapshot, self.effect().is_some(), recorded)
    }

    pub(super) fn effect(&self) -> Option<Effect<'_>> {
        if let Some(decision) = &self.decision {
            return Some(Effect {
                action: decision.action.as_str(),
                rule: &decision.rule,
                reason: decision.reason.clone(),
                new_status: decision.action.status().as_str(),
                dedup_key: self.snapshot.dedup_key(&decision.rule),
                duration: decision.duration_secs.map(|s| s as f64),
            });
        }
        let timer = self.snapshot.due_timer()?;
        Some(Effect {
            action: "restore",
            rule: &timer.set_by,
            reason: timer.restore_reason(),
            new_status: timer.restores_to.as_str(),
            dedup_key: self.snapshot.restore_key(),
            duration: None,
        })
    }
}

/// What [`Evaluations::record_fenced_evaluations`] wrote for one entity that passed the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The action applied now; `None` if there was no decision or its dedup key existed.
    pub action_id: Option<i64>,
}

/// The fenced statement of [`Evaluations::record_locked`] for the evaluations (each entity once) on
/// this connection. It skips entity rows locked elsewhere; [`LockedRows::Wait`] locks them in
/// its own transaction first, which the statement never skips.
pub(super) async fn record_fenced(
    connection: &mut PgConnection,
    worker: &str,
    evaluations: &[&FencedEvaluation],
    submit: bool,
) -> Result<HashMap<String, Recorded>> {
    // A text column of the UNNEST input, borrowed from the evaluations (no copies); the casts
    // below name the types bound to the arrays, which the macro would otherwise want owned.
    fn strings<'a>(
        evaluations: &[&'a FencedEvaluation],
        field: impl Fn(&'a FencedEvaluation) -> Option<&'a str>,
    ) -> Vec<Option<&'a str>> {
        evaluations.iter().map(|e| field(e)).collect()
    }
    let versions: Vec<i64> = evaluations
        .iter()
        .map(|e| e.snapshot.moderation_version)
        .collect();
    let event_counts: Vec<i64> = evaluations.iter().map(|e| e.snapshot.event_count).collect();
    let started: Vec<DateTime<Utc>> = evaluations.iter().map(|e| e.started_at).collect();
    let decisions: Vec<Json<&Verdict>> = evaluations.iter().map(|e| Json(&e.verdict)).collect();
    // Every evaluation keeps the snapshot it decided on (about 340 bytes with the default rules;
    // BENCHMARKS.md), so that a backtest can replay any of them; an action keeps it too.
    let snapshots: Vec<Json<&Snapshot>> = evaluations.iter().map(|e| Json(&e.snapshot)).collect();
    let due: Vec<Option<DateTime<Utc>>> = evaluations.iter().map(|e| e.due_at).collect();
    let effects: Vec<Option<Effect>> = evaluations.iter().map(|e| e.effect()).collect();
    let effect = |field: for<'a> fn(&'a Effect<'a>) -> Option<&'a str>| -> Vec<Option<&str>> {
        effects.iter().map(|e| e.as_ref().and_then(field)).collect()
    };
    let dedup_keys = effect(|e| Some(&e.dedup_key));
    // The labels the live rules gave: recorded once per entity and label (a restore gives none).
    let labels: Vec<Json<&[crate::rules::LabelDecision]>> = evaluations
        .iter()
        .map(|e| Json(e.verdict.labels.as_slice()))
        .collect();
    // The rules version that decided each: recorded on the evaluation, its action and the
    // action's webhook.
    let rules_versions: Vec<Option<i64>> = evaluations
        .iter()
        .map(|e| e.verdict.rules_version)
        .collect();
    // The trace an action's webhook continues (its evaluation's span), when spans are exported.
    let traces = strings(evaluations, |e| e.trace.as_deref());
    let durations: Vec<Option<f64>> = effects
        .iter()
        .map(|e| e.as_ref().and_then(|e| e.duration))
        .collect();
    // Each action's webhook, but for what the database gives it (`RulesActionApplied`).
    let applied: Vec<Option<Json<RulesActionApplied>>> = evaluations
        .iter()
        .zip(&effects)
        .map(|(e, effect)| {
            effect.as_ref().map(|effect| {
                Json(RulesActionApplied {
                    entity: e.snapshot.entity.as_str(),
                    action: effect.action,
                    rule: effect.rule,
                    reason: &effect.reason,
                    status: effect.new_status,
                    moderation_version: e.snapshot.moderation_version + 1,
                    rules_version: e.verdict.rules_version,
                })
            })
        })
        .collect();
    // A restricting decision's statement of reasons, written with its action (none when the
    // action's dedup key existed: the statement was written the first time).
    let statements: Vec<Option<Json<StatementBody>>> = evaluations
        .iter()
        .map(|e| e.statement.as_ref().map(|s| Json(s.stored())))
        .collect();
    // By label: rare (only rules whose labels restrict), so a map is fine.
    let label_statements: Vec<Option<Json<HashMap<&str, StatementBody>>>> = evaluations
        .iter()
        .map(|e| {
            (!e.label_statements.is_empty()).then(|| {
                Json(
                    e.label_statements
                        .iter()
                        .map(|(label, s)| (label.as_str(), s.stored()))
                        .collect(),
                )
            })
        })
        .collect();
    let rows = sqlx::query!(
        r#"WITH input AS (
               SELECT * FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::text[],
                                    $5::timestamptz[], $6::jsonb[], $7::jsonb[],
                                    $8::timestamptz[], $9::text[], $10::text[], $11::text[],
                                    $12::text[], $13::text[], $14::text[], $15::float8[],
                                    $16::jsonb[], $17::int8[], $18::text[], $19::jsonb[],
                                    $21::jsonb[], $26::jsonb[])
                   AS t(entity, version, event_count, worker, started_at, decisions, snapshot,
                        due_at, status, action, rule, reason, new_status, dedup_key, duration,
                        labels, rules_version, traceparent, statement, label_statements,
                        applied_payload)
           ),
           -- Each row that passes the fence, locked, with its input and the timer it holds:
           -- every later part reads this and nothing else of the input. (The planner takes an
           -- UNNEST for ten rows, so each join of the input to another part was a nested loop,
           -- a scan of the whole input per row: quadratic in the batch.)
           locked AS MATERIALIZED (
               SELECT i.*, e.timer_ends_at, e.timer_restores_to, e.timer_action, e.timer_set_by
               FROM input i
               JOIN entities e ON e.entity = i.entity AND e.moderation_version = i.version
               ORDER BY e.entity
               FOR UPDATE OF e SKIP LOCKED
           ),
           applied AS (
               INSERT INTO actions (entity, action, rule, reason, previous_status, new_status,
                                    snapshot, applied_version, dedup_key, ends_at,
                                    displaced_timer, rules_version)
               SELECT l.entity, l.action, l.rule, l.reason, l.status, l.new_status, l.snapshot,
                      l.version, l.dedup_key, now() + make_interval(secs => l.duration),
                      -- A timed action over a timer in force keeps it, for its restore.
                      CASE WHEN l.duration IS NOT NULL AND l.timer_ends_at IS NOT NULL THEN
                          jsonb_build_object('ends_at', l.timer_ends_at,
                                             'restores_to', l.timer_restores_to,
                                             'action_id', l.timer_action,
                                             'set_by', l.timer_set_by)
                      END,
                      l.rules_version
               FROM locked l
               WHERE l.action IS NOT NULL
               ORDER BY l.dedup_key
               ON CONFLICT ON CONSTRAINT actions_dedup_key_unique DO NOTHING
               RETURNING id, entity, action, rule, reason, previous_status, new_status,
                         applied_version, dedup_key, ends_at, rules_version
           ),
           notified AS (
               INSERT INTO outbox (topic, idempotency_key, payload, traceparent)
               -- The payload as Rust built it, with what the database gave the action.
               SELECT $22::text, a.dedup_key,
                      l.applied_payload
                          || jsonb_build_object('action_id', a.id, 'ends_at', a.ends_at),
                      l.traceparent
               FROM applied a
               JOIN locked l ON l.entity = a.entity
               ORDER BY a.id
               RETURNING id
           ),
           -- The statement of reasons of each restricting action applied now, delivered to the
           -- platform and, when configured, to the Transparency Database (statements.rs).
           issued AS (
               INSERT INTO statements (puid, entity, action_id, rule, decided_by,
                                       previous_status, status, body)
               SELECT l.statement ->> 'puid', a.entity, a.id, a.rule, 'automated',
                      a.previous_status, a.new_status, l.statement
               FROM applied a
               JOIN locked l ON l.entity = a.entity
               WHERE l.statement IS NOT NULL
               ORDER BY a.id
               RETURNING id, puid, entity, action_id
           ),
           labelled AS (
               INSERT INTO entity_labels (entity, label, rule, reason)
               SELECT k.entity, l.label, l.rule, l.reason
               FROM locked k
               CROSS JOIN LATERAL jsonb_to_recordset(k.labels) AS l(rule text, label text,
                                                                    reason text)
               ORDER BY 1, 2
               ON CONFLICT (entity, label) DO NOTHING
               RETURNING entity, label, rule, reason
           ),
           label_notes AS (
               INSERT INTO outbox (topic, idempotency_key, payload)
               SELECT $23::text, 'label:' || b.entity || ':' || b.label,
                      jsonb_build_object('entity', b.entity, 'label', b.label, 'rule', b.rule,
                                         'reason', b.reason)
               FROM labelled b
               ORDER BY b.entity, b.label
               ON CONFLICT ON CONSTRAINT outbox_idempotency_key_unique DO NOTHING
               RETURNING id
           ),
           -- A label given now whose rule says its labels restrict has a statement of its own.
           label_issued AS (
               INSERT INTO statements (puid, entity, action_id, rule, decided_by,
                                       previous_status, status, label, body)
               SELECT k.label_statements -> b.label ->> 'puid', b.entity, NULL, b.rule,
                      'automated', k.status, k.status, b.label, k.label_statements -> b.label
               FROM labelled b
               JOIN locked k ON k.entity = b.entity
               WHERE k.label_statements ? b.label
               ORDER BY b.entity, b.label
               RETURNING id, puid, entity, action_id
           ),
           every_issued AS (
               SELECT * FROM issued UNION ALL SELECT * FROM label_issued
           ),
           -- After the actions' and the labels' own rows (reading `notified` and `label_notes`
           -- waits for them): the outbox delivers an entity's rows in the order they were
           -- written, so the platform hears of an action or a label before its statement. The
           -- rows name the statement; its body is read when they are delivered (`outbox.rs`),
           -- not written twice.
           statement_notes AS (
               INSERT INTO outbox (topic, idempotency_key, payload, receiver)
               SELECT $24::text, 'statement:' || s.puid,
                      jsonb_build_object('statement_id', s.id, 'puid', s.puid,
                                         'entity', s.entity, 'action_id', s.action_id),
                      'platform'
               FROM every_issued s
               WHERE (SELECT count(*) FROM notified) + (SELECT count(*) FROM label_notes) >= 0
               UNION ALL
               SELECT $25::text, 'dsa:' || s.puid,
                      jsonb_build_object('statement_id', s.id),
                      'dsa'
               FROM every_issued s WHERE $20
           ),
           fenced AS (
               UPDATE entities e SET
                   status = COALESCE(a.new_status, e.status),
                   moderation_version = e.moderation_version
                                        + CASE WHEN a.id IS NULL THEN 0 ELSE 1 END,
                   -- An action replaces the timer in force: a timed one sets its own (which
                   -- restores the status it found), a restore or an untimed one clears it.
                   -- A restore puts back the timer its timed action displaced, if any.
                   timer_ends_at = CASE WHEN a.id IS NULL THEN e.timer_ends_at
                                        WHEN a.action = 'restore' THEN
                                            (SELECT (t.displaced_timer->>'ends_at')::timestamptz
                                             FROM actions t WHERE t.id = e.timer_action)
                                        ELSE a.ends_at END,
                   timer_restores_to = CASE WHEN a.id IS NULL THEN e.timer_restores_to
                                            WHEN a.action = 'restore' THEN
                                                (SELECT t.displaced_timer->>'restores_to'
                                                 FROM actions t WHERE t.id = e.timer_action)
                                            WHEN a.ends_at IS NULL THEN NULL
                                            ELSE a.previous_status END,
                   timer_action = CASE WHEN a.id IS NULL THEN e.timer_action
                                       WHEN a.action = 'restore' THEN
                                           (SELECT (t.displaced_timer->>'action_id')::int8
                                            FROM actions t WHERE t.id = e.timer_action)
                                       WHEN a.ends_at IS NULL THEN NULL ELSE a.id END,
                   timer_set_by = CASE WHEN a.id IS NULL THEN e.timer_set_by
                                       WHEN a.action = 'restore' THEN
                                           (SELECT t.displaced_timer->>'set_by'
                                            FROM actions t WHERE t.id = e.timer_action)
                                       WHEN a.ends_at IS NULL THEN NULL ELSE a.rule END,
                   evaluated_event_count = GREATEST(e.evaluated_event_count, i.event_count),
                   -- Owed no more once every event recorded now, folded or not, was seen.
                   pending_since = CASE WHEN (SELECT c.event_count FROM entity_counts c
                                              WHERE c.entity = e.entity)
                                             <= i.event_count THEN NULL
                                        ELSE e.pending_since END,
                   evaluation_count = e.evaluation_count + 1,
                   last_evaluated_at = now()
               FROM locked i
               LEFT JOIN applied a ON a.entity = i.entity
               WHERE e.entity = i.entity AND e.moderation_version = i.version
               -- The evaluation's own columns come along: joining the locked rows again would
               -- be another nested loop over the batch (see locked).
               RETURNING e.entity, a.id AS action_id, i.worker, i.started_at, i.version,
                         i.event_count, i.decisions, i.snapshot, i.due_at, i.rules_version)
           INSERT INTO evaluations (entity, worker, started_at, moderation_version, event_count,
                                    decisions, action_id, snapshot, due_at, rules_version)
           SELECT f.entity, f.worker, f.started_at, f.version, f.event_count, f.decisions,
                  f.action_id, f.snapshot, f.due_at, f.rules_version
           FROM fenced f
           RETURNING entity, action_id"#,
        &strings(evaluations, |e| Some(e.snapshot.entity.as_str())) as &[Option<&str>],
        &versions,
        &event_counts,
        &strings(evaluations, |_| Some(worker)) as &[Option<&str>],
        &started,
        &decisions as &[Json<&Verdict>],
        &snapshots as &[Json<&Snapshot>],
        &due as &[Option<DateTime<Utc>>],
        &strings(evaluations, |e| Some(e.snapshot.status.as_str())) as &[Option<&str>],
        &effect(|e| Some(e.action)) as &[Option<&str>],
        &effect(|e| Some(e.rule)) as &[Option<&str>],
        &effect(|e| Some(&e.reason)) as &[Option<&str>],
        &effect(|e| Some(e.new_status)) as &[Option<&str>],
        &dedup_keys as &[Option<&str>],
        &durations as &[Option<f64>],
        &labels as &[Json<&[crate::rules::LabelDecision]>],
        &rules_versions as &[Option<i64>],
        &traces as &[Option<&str>],
        &statements as &[Option<Json<StatementBody>>],
        submit,
        &label_statements as &[Option<Json<HashMap<&str, StatementBody>>>],
        Topic::ActionApplied.name(),
        Topic::LabelApplied.name(),
        Topic::StatementIssued.name(),
        Topic::StatementSubmitted.name(),
        &applied as &[Option<Json<RulesActionApplied>>],
    )
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            (
                row.entity,
                Recorded {
                    action_id: row.action_id,
                },
            )
        })
        .collect())
}

/// The completion of one evaluation from what the fenced statement recorded for it (`None`:
/// the version had moved and nothing was written).
pub(super) fn completion_of(
    snapshot: &Snapshot,
    acts: bool,
    recorded: Option<&Recorded>,
) -> Result<Completion> {
    match (recorded, acts) {
        (None, _) => Err(StoreError::VersionConflict {
            read: snapshot.moderation_version,
        }),
        (Some(_), false) => Ok(Completion::NoAction),
        (
            Some(Recorded {
                action_id: Some(id),
            }),
            true,
        ) => Ok(Completion::Applied {
            action_id: *id,
            author: None,
        }),
        (Some(Recorded { action_id: None }), true) => Ok(Completion::AlreadyApplied),
    }
}
