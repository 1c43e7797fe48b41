-- Day buckets: the long windows (7d, 30d, 90d) and decayed counts (store/fold.rs,
-- store/snapshots.rs). The fold adds an entity's events to their UTC receive day, as it adds
-- them to minute buckets, and deletes the entity's day buckets older than today and the 90
-- days before, in the same statement: rows are only written by a fold, so an entity and
-- signal never has more than 91 of them. The table is not partitioned: its reads are by
-- entity, and a partition per day would make each of them probe about 91 partitions.
CREATE TABLE signal_days (
    entity      TEXT NOT NULL,
    signal      TEXT NOT NULL,
    day         DATE NOT NULL,
    count       BIGINT NOT NULL,
    weight_sum  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (entity, signal, day)
) WITH (fillfactor = 70);

-- The events already folded and still retained go into their days (those of the last 91).
INSERT INTO signal_days (entity, signal, day, count, weight_sum)
SELECT ev.entity, ev.signal, (ev.received_at AT TIME ZONE 'UTC')::date, count(*), sum(ev.weight)
FROM events ev JOIN entities e ON e.entity = ev.entity
WHERE ev.xid < e.folded_horizon
  AND ev.received_at >= date_trunc('day', now(), 'UTC') - interval '90 days'
GROUP BY 1, 2, 3;

-- The day figures as reads see them: folded plus not yet folded (as bucket_counts for minutes).
CREATE VIEW day_counts AS
    SELECT entity, signal, day, sum(count)::int8 AS count, sum(weight_sum) AS weight_sum
    FROM (SELECT entity, signal, day, count, weight_sum FROM signal_days
          UNION ALL
          SELECT entity, signal, (received_at AT TIME ZONE 'UTC')::date, 1, weight
          FROM unfolded_events) c
    GROUP BY entity, signal, day;
