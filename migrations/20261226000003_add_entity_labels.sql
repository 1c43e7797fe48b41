-- Labels (`labels = ["spam"]` on a rule): effects that do not change the status. A label is
-- recorded on the entity once (the primary key is its dedup), in the fenced completion of the
-- evaluation whose live rule gave it, with an outbox row (`label.applied`) in the same
-- statement.
CREATE TABLE entity_labels (
    entity      TEXT NOT NULL,
    label       TEXT NOT NULL,
    rule        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, label)
);
