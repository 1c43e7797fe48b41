-- Partitions are analyzed once their time is over (events ones once sealed), by the retention
-- pass: a partition is planned for while it is empty or small, and a plan cached then (a
-- generic plan of a prepared statement, a PL/pgSQL function's) goes on reading the partition
-- the way that suited it small. ANALYZE records its final size and invalidates those plans, so
-- every connection plans for it again as it is. quiesce does not wait for autovacuum to do it:
-- some servers run without it, and its threshold (10% of the rows changed) may never be met by
-- a partition that takes no more rows. A partition that takes rows is not analyzed: an empty
-- partition analyzed is costed at zero pages, where one never analyzed is costed at ten, and
-- the index probes ingest relies on must stay the cheaper plan.
ALTER TABLE partitions ADD COLUMN analyzed_at timestamptz;

-- Analyzes one partition whose time is over (an events partition once sealed) and not analyzed
-- yet; returns whether this call did. A partition another process is analyzing is skipped.
CREATE FUNCTION partition_analyze(named text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM partitions p
    WHERE p.name = named AND p.analyzed_at IS NULL AND p.upper_bound <= now()
      AND (p.parent <> 'events' OR p.sealed_at IS NOT NULL)
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('ANALYZE %I', named);
    UPDATE partitions SET analyzed_at = now() WHERE name = named;
    RETURN true;
END
$$;
