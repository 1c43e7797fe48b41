-- Ingest's two reads of rows that exist (a group's duplicates, its entities' rows) as functions
-- whose plans are the same whatever the tables held when they were made.
--
-- The events recorded with these ids, in any partition, each with its entity and whether that
-- entity still owes an evaluation (an event of it, folded or not, that no evaluation has seen,
-- or a mark of the repair sweep: the sweep's own question). Ingest asks it for every id of a
-- group before inserting (the ids found are the group's duplicates, in the current partition or
-- an older one); `Store::duplicates_of` for the ids a concurrent group recorded.
--
-- Every plan of it probes each partition's unique index on id, whatever the partitions held
-- when it was planned. PL/pgSQL keeps a statement's plan for the session, and Postgres turns to
-- a generic plan made on the sizes of that moment: the first version of this function
-- (20270120000001) also took a range of `received_at`, and its plan, made while the current
-- partition was nearly empty, read that partition by its `received_at` index from end to end at
-- every call, so each ingest statement cost more as the partition filled (an outside soak fell
-- from 5,100 to 1,500 events/s in 180 s). Here id is the only column an index can be used for,
-- and sequential scans, hash and merge joins are off, so no size makes another plan cheaper:
-- the events by id, then each one's entity by its key, then its unfolded events by
-- (entity, xid). Nothing depends on ANALYZE or autovacuum having run.
-- STABLE: it reads the snapshot of the statement that calls it.
CREATE FUNCTION recorded_events(ids text[])
RETURNS TABLE (id text, entity text, owed boolean)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.id, e.entity,
           coalesce(x.pending_since IS NOT NULL
                    OR x.event_count + (SELECT count(*) FROM events u
                                        WHERE u.entity = x.entity
                                          AND u.xid >= x.folded_horizon)
                       > x.evaluated_event_count,
                    true)
    FROM events e
    -- Every id found is a duplicate, its entity's row or not (an event written without one
    -- still owes its evaluation).
    LEFT JOIN entities x ON x.entity = e.entity
    WHERE e.id = ANY(ids);
END
$$;

-- The entities of `names` that have no row yet, as the calling statement's snapshot has them
-- (a plain read: it waits for no transaction that holds an entity's row). Ingest makes a row for
-- each (store/events.rs). Read here for the reason above: a plan of the ingest statement made
-- while `entities` was small answered the question with a hash anti join over a sequential scan
-- of the whole table, so each group read every entity (2.8 ms a group at 10,000 entities, and
-- growing with them). Here each name is one probe of the table's key, whatever its size was.
CREATE FUNCTION entities_unknown(names text[])
RETURNS TABLE (entity text)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT DISTINCT n.name FROM unnest(names) AS n(name)
    WHERE NOT EXISTS (SELECT 1 FROM entities x WHERE x.entity = n.name);
END
$$;

-- The version with a `received_at` range stays for processes of the previous release while a
-- deployment upgrades (their ingest statement calls it); a later release drops it.
COMMENT ON FUNCTION recorded_events(text[], timestamptz, timestamptz) IS
    'superseded by recorded_events(text[]); kept for processes of the previous release';

