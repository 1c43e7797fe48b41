-- Windowed attribute aggregates (count_in with a filter, max_in): per entity, signal, attribute,
-- value ('' for a number attribute) and receive minute, the events and, for a number, the
-- largest value. Folded at evaluation like signal_buckets (store/fold.rs); reads add the events
-- not folded yet. Only the last 25 hours matter (the longest window is 24 h): retention deletes
-- older rows in bounded batches, by the bucket_start index.
CREATE TABLE attribute_buckets (
    entity        TEXT NOT NULL,
    signal        TEXT NOT NULL,
    attribute     TEXT NOT NULL,
    value         TEXT NOT NULL,
    bucket_start  TIMESTAMPTZ NOT NULL,
    count         BIGINT NOT NULL,
    max           DOUBLE PRECISION,
    PRIMARY KEY (entity, signal, attribute, value, bucket_start)
) WITH (fillfactor = 70);
CREATE INDEX attribute_buckets_start_idx ON attribute_buckets (bucket_start);
