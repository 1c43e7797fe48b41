-- Ingest appends, the evaluation folds (store/fold.rs). Ingest writes the event row (and the
-- entity row the first time); the evaluation, which holds the entity's lock, folds the events
-- it has not folded yet into the entity's count, totals and minute buckets. What is folded is
-- told by transaction ids: an event carries the id of the transaction that inserted it, and an
-- entity's events with an id below its folded_horizon are folded. A fold moves the horizon up
-- to its snapshot's xmin, below which every transaction has ended, so no event can still turn
-- up under it. Reads add the events at or above the horizon to the folded figures.
--
-- Stop every process of the previous version before this runs: their ingest moves the
-- counters itself, and an event it recorded after this would be counted twice.

-- The rows already here are in the totals: transaction id 0, below every horizon.
ALTER TABLE events ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
-- An entity that exists has folded everything (horizon 1); one made from now on, nothing.
ALTER TABLE entities ADD COLUMN folded_horizon xid8 NOT NULL DEFAULT '1';
ALTER TABLE entities ALTER COLUMN folded_horizon SET DEFAULT '0';

-- One index serves both reads by entity: the unfolded events (entity, xid above the horizon)
-- and the distinct actors per signal (index-only, from the included columns).
DROP INDEX events_entity_signal_actor_idx;
CREATE INDEX events_entity_xid_idx ON events (entity, xid) INCLUDE (signal, actor);
-- The repair sweep reads the events received since its last pass. A block range index costs
-- ingest next to nothing (the heap is appended in receive order).
CREATE INDEX events_received_brin ON events USING brin (received_at)
    WITH (pages_per_range = 32, autosummarize = on);

-- How far the repair sweep has read the events (store/sweep.rs): every entity with an
-- unevaluated event received before scanned_to is marked pending. The events before this
-- migration were counted by ingest, which marked their entities itself.
CREATE TABLE sweep_marks (
    name        TEXT PRIMARY KEY,
    scanned_to  TIMESTAMPTZ NOT NULL
);
INSERT INTO sweep_marks (name, scanned_to) VALUES ('events', now());

-- The figures as reads see them: folded plus not yet folded. The service reads these, and so
-- can tests and operators.
CREATE VIEW unfolded_events AS
    SELECT ev.* FROM events ev JOIN entities e ON e.entity = ev.entity
    WHERE ev.xid >= e.folded_horizon;

-- What an entity owes is read here too: its events, folded or not, above what its last
-- evaluation saw (store/sweep.rs, store/evaluations.rs).
CREATE VIEW entity_counts AS
    SELECT e.entity, e.event_count + u.n AS event_count, e.evaluated_event_count,
           greatest(e.last_event_at, u.last_at) AS last_event_at,
           e.status, e.moderation_version, e.evaluation_count
    FROM entities e
    CROSS JOIN LATERAL (SELECT count(*) AS n, max(ev.received_at) AS last_at FROM events ev
                        WHERE ev.entity = e.entity AND ev.xid >= e.folded_horizon) u;

CREATE VIEW signal_counts AS
    SELECT entity, signal, sum(count)::int8 AS count, sum(weight_sum) AS weight_sum
    FROM (SELECT entity, signal, count, weight_sum FROM signal_totals
          UNION ALL
          SELECT entity, signal, 1, weight FROM unfolded_events) c
    GROUP BY entity, signal;

CREATE VIEW bucket_counts AS
    SELECT entity, signal, bucket_start, sum(count)::int8 AS count, sum(weight_sum) AS weight_sum
    FROM (SELECT entity, signal, bucket_start, count, weight_sum FROM signal_buckets
          UNION ALL
          SELECT entity, signal, date_trunc('minute', received_at), 1, weight
          FROM unfolded_events) c
    GROUP BY entity, signal, bucket_start;
