-- The source of truth for the debounce pipeline: every accepted event, running totals per
-- entity and signal, minute buckets for windowed rules, and the entity's moderation state.

CREATE TABLE entities (
    entity                 TEXT PRIMARY KEY,
    kind                   TEXT NOT NULL,
    -- visible < flagged < hidden < suspended; automation only escalates.
    status                 TEXT NOT NULL DEFAULT 'visible'
                           CHECK (status IN ('visible', 'flagged', 'hidden', 'suspended')),
    -- The fence: every status change bumps it, and a writer only writes the version it read.
    moderation_version     BIGINT NOT NULL DEFAULT 0,
    -- Events recorded for the entity, and how many of them the last completed evaluation saw.
    -- event_count > evaluated_event_count means an evaluation is owed (the repair sweep's query).
    event_count            BIGINT NOT NULL DEFAULT 0,
    evaluated_event_count  BIGINT NOT NULL DEFAULT 0,
    pending_since          TIMESTAMPTZ,
    last_event_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    evaluation_count       BIGINT NOT NULL DEFAULT 0,
    last_evaluated_at      TIMESTAMPTZ,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX entities_pending_idx ON entities (pending_since) WHERE pending_since IS NOT NULL;

CREATE TABLE events (
    id           TEXT PRIMARY KEY,
    entity       TEXT NOT NULL,
    signal       TEXT NOT NULL,
    actor        TEXT,
    weight       DOUBLE PRECISION NOT NULL,
    occurred_at  TIMESTAMPTZ,
    priority     TEXT NOT NULL CHECK (priority IN ('normal', 'critical')),
    received_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX events_entity_idx ON events (entity, received_at);
CREATE INDEX events_received_idx ON events (received_at);

CREATE TABLE signal_totals (
    entity      TEXT NOT NULL,
    signal      TEXT NOT NULL,
    count       BIGINT NOT NULL,
    weight_sum  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (entity, signal)
);

-- Per-minute buckets (by receive time) so rules can count over trailing windows.
CREATE TABLE signal_buckets (
    entity        TEXT NOT NULL,
    signal        TEXT NOT NULL,
    bucket_start  TIMESTAMPTZ NOT NULL,
    count         BIGINT NOT NULL,
    weight_sum    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (entity, signal, bucket_start)
);
