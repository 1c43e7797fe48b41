-- What the workers did: one row per completed evaluation, one per applied action, and the
-- outbox that carries each action to the platform.

CREATE TABLE evaluations (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entity              TEXT NOT NULL,
    worker              TEXT NOT NULL,
    started_at          TIMESTAMPTZ NOT NULL,
    finished_at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    moderation_version  BIGINT NOT NULL,
    event_count         BIGINT NOT NULL,
    -- The rule decisions on the snapshot, and the action taken (NULL: none).
    decisions           JSONB NOT NULL,
    action_id           BIGINT
);

CREATE INDEX evaluations_entity_idx ON evaluations (entity, started_at);

CREATE TABLE actions (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entity              TEXT NOT NULL,
    action              TEXT NOT NULL CHECK (action IN ('flag', 'hide', 'suspend')),
    rule                TEXT NOT NULL,
    reason              TEXT NOT NULL,
    previous_status     TEXT NOT NULL,
    new_status          TEXT NOT NULL,
    -- The snapshot the decision was made on, and the version it applied to.
    snapshot            JSONB NOT NULL,
    applied_version     BIGINT NOT NULL,
    -- hash(entity, rule, hour): the authority that an action takes effect at most once.
    dedup_key           TEXT NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT actions_dedup_key_unique UNIQUE (dedup_key)
);

CREATE INDEX actions_entity_idx ON actions (entity, id DESC);

-- Written in the same transaction as the action; a dispatcher delivers it with the
-- idempotency key, so a receiver sees each action once.
CREATE TABLE outbox (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic            TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    payload          JSONB NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivered_at     TIMESTAMPTZ,
    attempts         INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT outbox_idempotency_key_unique UNIQUE (idempotency_key)
);

CREATE INDEX outbox_undelivered_idx ON outbox (id) WHERE delivered_at IS NULL;
