-- Timed actions (src/domain/timer.rs, docs/state-machine.md): an action taken for a while
-- (`duration` on a rule or an override) ends with a restore, an action of its own. The entity's
-- timer in force is on its row: when it ends, what it restores, and the action (or override)
-- that set it. Postgres is the truth: the repair sweep finds every timer that is due, whatever
-- Redis lost, and schedules the entity (store/timers.rs).
ALTER TABLE entities
    ADD COLUMN timer_ends_at     TIMESTAMPTZ,
    ADD COLUMN timer_restores_to TEXT
        CHECK (timer_restores_to IN ('visible', 'flagged', 'hidden', 'suspended')),
    -- The timed action; NULL for a moderator's timed override.
    ADD COLUMN timer_action      BIGINT,
    -- What set it: the rule's name, or `override` for a moderator's timed override.
    ADD COLUMN timer_set_by      TEXT,
    ADD CONSTRAINT entities_timer_complete CHECK (
        (timer_ends_at IS NULL) = (timer_restores_to IS NULL)
        AND (timer_ends_at IS NULL) = (timer_set_by IS NULL));

CREATE INDEX entities_timer_idx ON entities (timer_ends_at) WHERE timer_ends_at IS NOT NULL;

-- A restore is an action like any other (version-checked, deduplicated, delivered, reversible);
-- a timed action keeps when it was to end.
ALTER TABLE actions DROP CONSTRAINT actions_action_check;
ALTER TABLE actions ADD CONSTRAINT actions_action_check
    CHECK (action IN ('flag', 'hide', 'suspend', 'restore'));
ALTER TABLE actions ADD COLUMN ends_at TIMESTAMPTZ;

-- A moderator may end a timer early.
ALTER TABLE moderator_decisions DROP CONSTRAINT moderator_decisions_kind_check;
ALTER TABLE moderator_decisions ADD CONSTRAINT moderator_decisions_kind_check
    CHECK (kind IN ('reversal', 'override', 'timer_end'));
