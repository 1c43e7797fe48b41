-- Retention by whole partitions. Events (by received_at), evaluation records (by finished_at)
-- and minute buckets (by bucket_start) are range-partitioned by time; retention drops a
-- partition once all of it is past the retention window (no row-by-row delete, so no dead rows
-- and no vacuum debt left behind). Partitions are made ahead of time by the service
-- (`partitions_extend`, from maintenance, at startup and when an insert finds none), and this
-- migration makes the first ones. docs/operations.md describes the whole cycle.
--
-- The tables as they were are kept as the first partition of each (`<table>_legacy`, every
-- time before this migration), so no row is copied; a table that was empty is dropped instead.
-- A legacy partition is dropped whole, like the others, once its newest row is past retention.

-- The partitions the service made, with their bounds: [lower_bound, upper_bound).
CREATE TABLE partitions (
    name         text PRIMARY KEY,
    parent       text NOT NULL CHECK (parent IN ('events', 'evaluations', 'signal_buckets')),
    lower_bound  timestamptz NOT NULL,
    upper_bound  timestamptz NOT NULL CHECK (upper_bound > lower_bound),
    -- Events only: when the partition was sealed. A sealed partition takes no more rows (a
    -- trigger refuses them) and every row it took was committed before the seal, so an insert
    -- that sees the seal can trust its dedup check against the partition (store/partitions.rs).
    sealed_at    timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX partitions_parent_upper ON partitions (parent, upper_bound);

-- What a sealed events partition answers an insert: a serialization failure, which the service
-- retries in a new transaction (whose receive time falls in a newer partition).
CREATE FUNCTION refuse_insert_into_sealed_partition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'partition % is sealed: its receive times are over', TG_TABLE_NAME
        USING ERRCODE = 'serialization_failure',
              HINT = 'retry in a new transaction, which is received into a newer partition';
END
$$;

-- Makes and attaches the partition [from_time, to_time) of a table; returns its name
-- (<table>_p<YYYYMMDD>_<HHMMSS> of its lower bound, UTC). The table is made apart and then
-- attached, which locks the parent only in SHARE UPDATE EXCLUSIVE mode: inserts and reads of
-- the other partitions go on meanwhile. An events partition gets its own unique index on id:
-- Postgres has no unique index on a partitioned table without the partition key.
CREATE FUNCTION partition_add(of_table text, from_time timestamptz, to_time timestamptz)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    made text := of_table || '_p' || to_char(from_time AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS');
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                   'INCLUDING STORAGE INCLUDING COMPRESSION)', made, of_table);
    IF of_table = 'events' THEN
        EXECUTE format('CREATE UNIQUE INDEX %I ON %I (id)', made || '_id_key', made);
    ELSIF of_table = 'signal_buckets' THEN
        -- As before partitioning: room on each page for HOT updates of the counters.
        EXECUTE format('ALTER TABLE %I SET (fillfactor = 70)', made);
    END IF;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   of_table, made, from_time, to_time);
    INSERT INTO partitions (name, parent, lower_bound, upper_bound)
    VALUES (made, of_table, from_time, to_time);
    RETURN made;
END
$$;

-- Makes the partitions a table lacks up to now() + ahead, each ending on a multiple of `width`
-- (counted from 2000-01-01 UTC), the first starting where the last one ends (or, after a gap,
-- where the current width's period began); returns how many it made. One caller at a time
-- per table (an advisory lock); the others then find the partitions made.
CREATE FUNCTION partitions_extend(of_table text, width interval, ahead interval)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    origin CONSTANT timestamptz := '2000-01-01 00:00:00+00';
    from_time timestamptz;
    to_time timestamptz;
    made integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('quiesce.partitions'), hashtext(of_table));
    SELECT max(p.upper_bound) INTO from_time FROM partitions p WHERE p.parent = of_table;
    from_time := greatest(coalesce(from_time, '-infinity'), date_bin(width, now(), origin));
    WHILE from_time < now() + ahead LOOP
        to_time := date_bin(width, from_time, origin) + width;
        PERFORM partition_add(of_table, from_time, to_time);
        from_time := to_time;
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

-- Seals an events partition whose time is over: waits for every transaction writing into it
-- (the SHARE ROW EXCLUSIVE lock conflicts with theirs, not with readers), then adds the trigger
-- that refuses any later insert, and records the seal. Returns whether this call sealed it.
CREATE FUNCTION partition_seal(sealed text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('LOCK TABLE %I IN SHARE ROW EXCLUSIVE MODE', sealed);
    PERFORM 1 FROM partitions p
    WHERE p.name = sealed AND p.parent = 'events' AND p.sealed_at IS NULL
      AND p.upper_bound <= now()
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TRIGGER sealed BEFORE INSERT ON %I FOR EACH ROW '
                   'EXECUTE FUNCTION refuse_insert_into_sealed_partition()', sealed);
    UPDATE partitions SET sealed_at = now() WHERE name = sealed;
    RETURN true;
END
$$;

-- The rows of a partition about to be dropped, as ANALYZE counts them: exact up to 30,000
-- pages (about 234 MB: every page is read), an estimate from a 30,000-page sample above.
CREATE FUNCTION partition_rows(counted text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ANALYZE %I', counted);
    RETURN (SELECT greatest(c.reltuples, 0)::bigint FROM pg_class c
            WHERE c.oid = to_regclass(quote_ident(counted)));
END
$$;

-- Where a partition stands: 'attached', 'detaching' (a DETACH ... CONCURRENTLY that did not
-- finish) or 'detached' (its table is no partition any more, or is gone).
CREATE FUNCTION partition_state(named text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT CASE WHEN i.inhdetachpending THEN 'detaching' ELSE 'attached' END
                     FROM pg_inherits i WHERE i.inhrelid = to_regclass(quote_ident(named))),
                    'detached')
$$;

-- Drops a detached partition's table and forgets it.
CREATE FUNCTION partition_forget(dropped text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF partition_state(dropped) <> 'detached' THEN
        RAISE EXCEPTION 'partition % is still attached', dropped;
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %I', dropped);
    DELETE FROM partitions WHERE name = dropped;
END
$$;

-- The old tables become legacy partitions: renamed with their indexes, then attached (or
-- dropped when empty). Their upper bound is past every row they hold.
ALTER TABLE events RENAME TO events_legacy;
ALTER TABLE events_legacy RENAME CONSTRAINT events_pkey TO events_legacy_pkey;
ALTER INDEX events_entity_signal_actor_idx RENAME TO events_legacy_entity_signal_actor_idx;
ALTER TABLE evaluations RENAME TO evaluations_legacy;
ALTER TABLE evaluations_legacy RENAME CONSTRAINT evaluations_pkey TO evaluations_legacy_pkey;
ALTER INDEX evaluations_entity_idx RENAME TO evaluations_legacy_entity_idx;
ALTER SEQUENCE evaluations_id_seq RENAME TO evaluations_legacy_id_seq;
ALTER TABLE signal_buckets RENAME TO signal_buckets_legacy;
ALTER TABLE signal_buckets_legacy RENAME CONSTRAINT signal_buckets_pkey TO signal_buckets_legacy_pkey;

CREATE TABLE events (
    id           TEXT NOT NULL,
    entity       TEXT NOT NULL,
    signal       TEXT NOT NULL,
    actor        TEXT,
    weight       DOUBLE PRECISION NOT NULL,
    occurred_at  TIMESTAMPTZ,
    priority     TEXT NOT NULL
                 CONSTRAINT events_priority_check CHECK (priority IN ('normal', 'critical')),
    received_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    author       TEXT
) PARTITION BY RANGE (received_at);
-- Distinct actors per signal (snapshots). No index on received_at: retention drops partitions.
CREATE INDEX events_entity_signal_actor_idx ON events (entity, signal, actor);

-- Evaluation ids stay unique across partitions: one identity on the parent, continuing where
-- the old table's left off.
CREATE TABLE evaluations (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY,
    entity              TEXT NOT NULL,
    worker              TEXT NOT NULL,
    started_at          TIMESTAMPTZ NOT NULL,
    finished_at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    moderation_version  BIGINT NOT NULL,
    event_count         BIGINT NOT NULL,
    decisions           JSONB NOT NULL,
    action_id           BIGINT,
    snapshot            JSONB,
    due_at              TIMESTAMPTZ
) PARTITION BY RANGE (finished_at);
CREATE INDEX evaluations_entity_idx ON evaluations (entity, started_at);

CREATE TABLE signal_buckets (
    entity        TEXT NOT NULL,
    signal        TEXT NOT NULL,
    bucket_start  TIMESTAMPTZ NOT NULL,
    count         BIGINT NOT NULL,
    weight_sum    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (entity, signal, bucket_start)
) PARTITION BY RANGE (bucket_start);

DO $$
DECLARE
    ids_from bigint;
    legacy record;
    bound timestamptz;
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value END INTO ids_from FROM evaluations_legacy_id_seq s;
    ALTER TABLE evaluations_legacy ALTER COLUMN id DROP IDENTITY;
    IF ids_from IS NOT NULL THEN
        PERFORM setval(pg_get_serial_sequence('evaluations', 'id'), ids_from);
    END IF;
    FOR legacy IN SELECT * FROM (VALUES ('events', 'received_at'), ('evaluations', 'finished_at'),
                                        ('signal_buckets', 'bucket_start')) AS t(parent, key) LOOP
        EXECUTE format('SELECT max(%I) FROM %I', legacy.key, legacy.parent || '_legacy') INTO bound;
        IF bound IS NULL THEN
            EXECUTE format('DROP TABLE %I', legacy.parent || '_legacy');
        ELSE
            bound := greatest(clock_timestamp(), bound + interval '1 microsecond');
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                           legacy.parent, legacy.parent || '_legacy', bound);
            INSERT INTO partitions (name, parent, lower_bound, upper_bound)
            VALUES (legacy.parent || '_legacy', legacy.parent, '-infinity', bound);
        END IF;
    END LOOP;
END
$$;

-- Only retention's deletes used these (an empty legacy table took its indexes with it).
DROP INDEX IF EXISTS events_received_idx;
DROP INDEX IF EXISTS evaluations_finished_idx;
DROP INDEX IF EXISTS signal_buckets_start_idx;

-- The first partition of each table, a few seconds long: the service makes its own (of a width
-- derived from the retention) as soon as it starts, and a write that finds none makes it.
SELECT partition_add(t, first.from_time,
                     greatest(first.from_time, date_bin('1 second', clock_timestamp(), '2000-01-01'))
                     + interval '2 seconds')
FROM unnest(ARRAY['events', 'evaluations', 'signal_buckets']) AS t,
     LATERAL (SELECT coalesce(max(p.upper_bound), date_bin('1 minute', now(), '2000-01-01'))
              AS from_time FROM partitions p WHERE p.parent = t) AS first;
