-- Attributes (issue 25): the scalar facts an event carries, folded per entity like the counts,
-- and what the platform tells quiesce of an entity (its context), kept with its history.

-- An event's attributes as it sent them (NULL when it sent none, so such an event costs nothing).
ALTER TABLE events ADD COLUMN attributes jsonb;

-- The folded part of the attribute aggregates (store/fold.rs), beside signal_totals: how many
-- events of a signal gave a string or boolean attribute each value (count with a filter,
-- distinct), and the largest and the latest of a number attribute (max, latest). Reads add
-- the events not folded yet (store/snapshots.rs).
CREATE TABLE attribute_values (
    entity     TEXT NOT NULL,
    signal     TEXT NOT NULL,
    attribute  TEXT NOT NULL,
    value      TEXT NOT NULL,
    count      BIGINT NOT NULL,
    PRIMARY KEY (entity, signal, attribute, value)
) WITH (fillfactor = 70);

CREATE TABLE attribute_numbers (
    entity     TEXT NOT NULL,
    signal     TEXT NOT NULL,
    attribute  TEXT NOT NULL,
    max        DOUBLE PRECISION NOT NULL,
    latest     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (entity, signal, attribute)
) WITH (fillfactor = 70);

-- Every change of an entity's context, never rewritten: the latest row of an entity is its
-- context now (PUT /v1/entities/{entity}/attributes).
CREATE TABLE entity_context (
    id          BIGSERIAL PRIMARY KEY,
    entity      TEXT NOT NULL,
    attributes  JSONB NOT NULL,
    set_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    set_by      TEXT NOT NULL
);
CREATE INDEX entity_context_entity_idx ON entity_context (entity, id DESC);
