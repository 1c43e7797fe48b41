-- Dead letters and failure records, durable: Redis holds them too, as a cache (the dead set is
-- the fast check of schedule.lua), but a failover or a flush may forget Redis' copy.

-- The failure record of an entity that is still being retried: one row per entity, deleted
-- when it is dead-lettered or redriven. A successful evaluation after `recorded_at` (both
-- Postgres' clock) ends the streak: the row is then stale, ignored and cleaned up later.
CREATE TABLE entity_failures (
    entity           text PRIMARY KEY,
    attempts         integer NOT NULL CHECK (attempts > 0),
    first_failure_at timestamptz NOT NULL,
    last_failure_at  timestamptz NOT NULL,
    last_error       text NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now()
);

-- Every dead-lettering, kept after a redrive as its audit trail: an entity has at most one
-- dead letter that is not redriven (the active one).
CREATE TABLE dead_letters (
    id               bigserial PRIMARY KEY,
    entity           text NOT NULL,
    reason           text NOT NULL CHECK (reason IN ('fatal', 'attempts_exhausted')),
    attempts         integer NOT NULL,
    first_failure_at timestamptz NOT NULL,
    last_failure_at  timestamptz NOT NULL,
    last_error       text NOT NULL,
    dead_lettered_at timestamptz NOT NULL,
    redriven_at      timestamptz,
    redriven_by      text,
    CHECK ((redriven_at IS NULL) = (redriven_by IS NULL))
);

CREATE UNIQUE INDEX dead_letters_active_entity ON dead_letters (entity) WHERE redriven_at IS NULL;
CREATE INDEX dead_letters_active_order ON dead_letters (dead_lettered_at, id) WHERE redriven_at IS NULL;
CREATE INDEX dead_letters_history ON dead_letters (entity, dead_lettered_at);
