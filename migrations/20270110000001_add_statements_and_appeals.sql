-- Statements of reasons (DSA Art. 17) and appeals against them (Art. 20).
--
-- Every restricting decision (an automated hide or suspend, a moderator's review decision or
-- override that hides or suspends) gets one statement, written in the decision's transaction.
-- `body` is the statement as the Transparency Database takes it (plus quiesce's own
-- `quiesce_*` keys); `puid` is its platform unique identifier, a random UUID, never reused.
CREATE TABLE statements (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    puid            TEXT NOT NULL,
    entity          TEXT NOT NULL,
    -- The action it explains ('hide', 'suspend', a 'review' decision); NULL for an override.
    action_id       BIGINT,
    -- What decided: a rule's name, or NULL for a moderator.
    rule            TEXT,
    -- 'automated', 'review', 'override' or 'reversal' (one that puts a restriction back).
    decided_by      TEXT NOT NULL CHECK (decided_by IN ('automated', 'review', 'override',
                                                        'reversal')),
    -- The status the decision found: what an upheld appeal of an override puts back.
    previous_status TEXT NOT NULL,
    -- The status the decision set.
    status          TEXT NOT NULL,
    -- The label it explains, for a rule whose labels restrict (`labels_restrict`).
    label           TEXT,
    body            JSONB NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- No index on `puid`: it is a random UUID (never reused by construction), and an index of
-- random keys was the dearest part of writing a statement (BENCHMARKS.md).
-- One statement per action: a retried decision cannot explain itself twice. (A label's is
-- written only by the insert of the label, once for each time it is given.)
CREATE UNIQUE INDEX statements_action_idx ON statements (action_id) WHERE action_id IS NOT NULL;
-- An entity's statements: those of its actions through the actions' own entity index, the
-- others (overrides, reversals, labels: few) through this one.
CREATE INDEX statements_entity_idx ON statements (entity, id) WHERE action_id IS NULL;
-- Appended in time order: a block range index serves `since` at almost no cost per insert.
CREATE INDEX statements_created_idx ON statements USING brin (created_at);

-- An appeal (internal complaint) against one statement's decision: forwarded by the platform,
-- decided by a person. One open appeal per decision.
CREATE TABLE appeals (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    statement_id    BIGINT NOT NULL REFERENCES statements (id),
    entity          TEXT NOT NULL,
    -- The platform's name for the appellant (the author, usually).
    appellant       TEXT NOT NULL,
    text            TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_by      TEXT,
    claim_until     TIMESTAMPTZ,
    decided_at      TIMESTAMPTZ,
    decided_by      TEXT,
    outcome         TEXT CHECK (outcome IN ('upheld', 'rejected')),
    decision_reason TEXT,
    CONSTRAINT appeals_decided_check CHECK ((decided_at IS NULL) = (outcome IS NULL))
);
CREATE UNIQUE INDEX appeals_one_open_idx ON appeals (statement_id) WHERE decided_at IS NULL;
CREATE INDEX appeals_waiting_idx ON appeals (id) WHERE decided_at IS NULL;
CREATE INDEX appeals_decided_idx ON appeals (decided_at) WHERE decided_at IS NOT NULL;
CREATE INDEX appeals_entity_idx ON appeals (entity, id);

-- Where a reversal came from: a moderator's review of the action, or an upheld appeal.
ALTER TABLE actions ADD COLUMN reversal_source TEXT
    CHECK (reversal_source IN ('review', 'appeal'));
UPDATE actions SET reversal_source = 'review' WHERE reversed_at IS NOT NULL;

-- Who an outbox row is for: the platform's webhook, or the Transparency Database (in batches).
ALTER TABLE outbox ADD COLUMN receiver TEXT NOT NULL DEFAULT 'platform'
    CHECK (receiver IN ('platform', 'dsa'));
DROP INDEX outbox_due_idx;
CREATE INDEX outbox_due_idx ON outbox (receiver, next_attempt_at, id)
    WHERE delivered_at IS NULL AND failed_at IS NULL;

ALTER TABLE moderator_decisions DROP CONSTRAINT moderator_decisions_kind_check;
ALTER TABLE moderator_decisions ADD CONSTRAINT moderator_decisions_kind_check
    CHECK (kind IN ('reversal', 'override', 'timer_end', 'review', 'appeal'));
