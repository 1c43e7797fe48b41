-- Delivery state of outbox rows: when to try next, what happened last, and when delivery was
-- given up (the failed-deliveries list).

ALTER TABLE outbox
    ADD COLUMN next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD COLUMN last_status      INTEGER,
    ADD COLUMN last_error       TEXT,
    ADD COLUMN failed_at        TIMESTAMPTZ;

DROP INDEX outbox_undelivered_idx;
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at, id) WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_failed_idx ON outbox (id) WHERE failed_at IS NOT NULL;

-- Delivery is given up when a retry would fall later than horizon_from + the delivery horizon;
-- a redrive starts a new horizon.
ALTER TABLE outbox ADD COLUMN horizon_from TIMESTAMPTZ NOT NULL DEFAULT now();
