-- The events recorded with these ids (received in [received_from, received_before)), each with
-- its entity and whether that entity still owes an evaluation (an event of it, folded or not,
-- that no evaluation has seen, or a mark of the repair sweep: the sweep's own question), read
-- by each partition's unique index on id and the (entity, xid) index, never by a scan.
--
-- Ingest asks it for the ids of a group that were not inserted (a sender's retries), inside a
-- statement a connection prepares once: read there directly, the plan cached while the
-- partitions were small scanned the current partition from end to end however large it grew
-- (320-474 ms a group on the retry bench). Planned here, with sequential scans off, it probes.
-- STABLE: it reads the snapshot of the statement that calls it.
CREATE FUNCTION recorded_events(ids text[], received_from timestamptz,
                                received_before timestamptz)
RETURNS TABLE (id text, entity text, owed boolean)
-- PL/pgSQL keeps the statement's plan for the session (an SQL function is planned again at
-- every call, which cost more than the probes); the partitions outside the bounds are pruned
-- when it runs.
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.id, e.entity,
           x.pending_since IS NOT NULL
           OR x.event_count + (SELECT count(*) FROM events u
                               WHERE u.entity = x.entity AND u.xid >= x.folded_horizon)
              > x.evaluated_event_count
    FROM events e
    JOIN entities x ON x.entity = e.entity
    WHERE e.id = ANY(ids) AND e.received_at >= received_from
      AND e.received_at < received_before;
END
$$;
