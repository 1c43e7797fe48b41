-- Moderators: reversals of automated actions, and overrides that cap what automation may do.

ALTER TABLE actions
    ADD COLUMN reversed_at      TIMESTAMPTZ,
    ADD COLUMN reversed_by      TEXT,
    ADD COLUMN reversal_reason  TEXT;

CREATE INDEX actions_created_idx ON actions (created_at);

-- A human decision on the entity: automation does not escalate past override_status until
-- override_until.
ALTER TABLE entities
    ADD COLUMN override_status  TEXT CHECK (override_status IN ('visible', 'flagged', 'hidden', 'suspended')),
    ADD COLUMN override_until   TIMESTAMPTZ,
    ADD COLUMN override_by      TEXT,
    ADD COLUMN override_reason  TEXT;

-- Who decided what, when and why (reversals and overrides), newest last.
CREATE TABLE moderator_decisions (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entity      TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('reversal', 'override')),
    action_id   BIGINT REFERENCES actions (id),
    moderator   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    status      TEXT NOT NULL,
    until       TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX moderator_decisions_entity_idx ON moderator_decisions (entity, id);
