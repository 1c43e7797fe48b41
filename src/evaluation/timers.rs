//! What a recorded completion leaves to schedule in Redis: a timed action's end, a timer's end
//! again, the events a restore left owed, the author's evaluation. Each is also found by the
//! repair sweep if its schedule is lost (Postgres holds the timer and the owed evaluations), so
//! a failure here only delays.

use chrono::Utc;

use super::{Evaluator, decision::Afterwards};
use crate::{
    domain::Priority,
    queue::Claim,
    store::Completion,
    telemetry::{Chain, names},
};

impl Evaluator {
    /// Schedules what the completion leaves, and counts (and logs) the action it applied.
    pub(super) async fn schedule_after(
        &self,
        claim: &Claim,
        afterwards: &Afterwards,
        completion: &Completion,
    ) {
        self.after_timers(claim, afterwards, completion).await;
        if let Completion::Applied {
            author: Some(author),
            ..
        } = completion
        {
            // The author's derived signal is committed; if this schedule is lost, the repair
            // sweep finds the author owed an evaluation.
            if let Err(error) = self
                .queue
                .schedule(&[(author.clone(), Priority::Normal)])
                .await
            {
                tracing::warn!(error = %Chain(&error), %author, "could not schedule the author; the sweep will");
            }
        }
        if let (Some(d), Completion::Applied { .. }) = (&afterwards.decision, completion) {
            metrics::counter!(names::ACTIONS, "action" => d.action.as_str(), "rule" => d.rule.clone())
                .increment(1);
            tracing::info!(action = d.action.as_str(), rule = %d.rule, "action applied");
        }
    }

    /// The schedule a completion leaves for timers: a timed action just applied is scheduled
    /// at its end; a timer that this evaluation neither ended nor replaced is scheduled at its
    /// end again (an event's evaluation came first and took its entry); after a restore, the
    /// events it left owed are scheduled.
    async fn after_timers(&self, claim: &Claim, afterwards: &Afterwards, completion: &Completion) {
        let applied = matches!(completion, Completion::Applied { .. });
        let timed = afterwards.decision.as_ref().and_then(|d| d.duration_secs);
        let ends_at = match (applied, timed, &afterwards.timer) {
            // The timer ends at Postgres' now() + duration, taken before this.
            (true, Some(secs), _) => Some(Utc::now() + chrono::Duration::seconds(secs as i64)),
            (false, _, Some(timer)) => Some(timer.ends_at),
            _ => None,
        };
        if let Some(ends_at) = ends_at {
            let entry = [(claim.entity.clone(), ends_at.timestamp_millis() + 1)];
            if let Err(error) = self.queue.schedule_at(&entry, false).await {
                tracing::warn!(error = %Chain(&error), "could not schedule a timed action's end; the sweep will");
            }
        }
        if applied && afterwards.decision.is_none() {
            self.after_restore(claim, afterwards).await;
        }
    }

    /// A timed action ended and the entity is restored: counted, and what the restore leaves
    /// scheduled.
    async fn after_restore(&self, claim: &Claim, afterwards: &Afterwards) {
        let set_by = afterwards.timer.as_ref().map(|t| t.set_by.clone());
        metrics::counter!(names::ACTIONS, "action" => "restore", "rule" => set_by.unwrap_or_default())
            .increment(1);
        tracing::info!(action = "restore", "a timed action ended: restored");
        // The restore may have put a timer it displaced back in force: its end is due in
        // Redis too (the sweep finds it otherwise).
        match self.store.timers().timer_of(&claim.entity).await {
            Ok(Some(displaced)) => {
                let entry = [(
                    claim.entity.clone(),
                    displaced.ends_at.timestamp_millis() + 1,
                )];
                if let Err(error) = self.queue.schedule_at(&entry, false).await {
                    tracing::warn!(error = %Chain(&error), "could not schedule a displaced timer's end; the sweep will");
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(error = %Chain(&error), "could not read the timer after a restore; the sweep will schedule it")
            }
        }
        if afterwards.events_owed
            && let Err(error) = self
                .queue
                .schedule(&[(claim.entity.clone(), Priority::Normal)])
                .await
        {
            tracing::warn!(error = %Chain(&error), "could not schedule the events a restore left; the sweep will");
        }
    }
}
