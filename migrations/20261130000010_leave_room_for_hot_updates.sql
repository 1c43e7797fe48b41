-- Entities, signal totals and minute buckets are updated in place on every event (counters)
-- and every evaluation. None of those updates changes an indexed column, so with free room on
-- the page Postgres can make them HOT updates (no new index entries). At the default fillfactor
-- of 100 a freshly filled page has no room and every such update writes to each index.
ALTER TABLE entities SET (fillfactor = 70);
ALTER TABLE signal_totals SET (fillfactor = 70);
ALTER TABLE signal_buckets SET (fillfactor = 70);
