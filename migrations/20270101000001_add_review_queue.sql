-- The review queue: every action automation flagged waits for a moderator. An item is the flag
-- action's own row (no copy to keep in step): its claim and its decision are columns here.
-- A moderator's decision that changes the status is an action of its own, kind 'review'
-- (version-checked, deduplicated, delivered and reversible like any other), which the
-- reversal figures of automation leave out as they leave out 'restore'.
ALTER TABLE actions DROP CONSTRAINT actions_action_check;
ALTER TABLE actions ADD CONSTRAINT actions_action_check
    CHECK (action IN ('flag', 'hide', 'suspend', 'restore', 'review'));

ALTER TABLE actions
    ADD COLUMN review_claimed_by   TEXT,
    ADD COLUMN review_claim_until  TIMESTAMPTZ,
    -- Escalated to an admin: still waiting, claimable by admins only.
    ADD COLUMN review_escalated_at TIMESTAMPTZ,
    ADD COLUMN reviewed_at         TIMESTAMPTZ,
    ADD COLUMN reviewed_by         TEXT,
    ADD COLUMN review_decision     TEXT
        CHECK (review_decision IN ('approve', 'hide', 'dismiss')),
    ADD COLUMN review_reason       TEXT,
    -- The moderator's own action, when the decision changed the status.
    ADD COLUMN review_action       BIGINT,
    ADD CONSTRAINT actions_review_decided_check
        CHECK ((reviewed_at IS NULL) = (review_decision IS NULL));

-- Waiting items, oldest first, at any depth of the queue.
CREATE INDEX actions_review_waiting_idx ON actions (id)
    WHERE action = 'flag' AND reviewed_at IS NULL AND reversed_at IS NULL;
-- Decisions per moderator and their agreement with automation, over the last hours.
CREATE INDEX actions_reviewed_idx ON actions (reviewed_at) WHERE reviewed_at IS NOT NULL;

ALTER TABLE moderator_decisions DROP CONSTRAINT moderator_decisions_kind_check;
ALTER TABLE moderator_decisions ADD CONSTRAINT moderator_decisions_kind_check
    CHECK (kind IN ('reversal', 'override', 'timer_end', 'review'));
