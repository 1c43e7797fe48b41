-- The snapshot an evaluation decided on, kept when a shadow rule matched it: what the shadow
-- rule would have done, and on what.
ALTER TABLE evaluations ADD COLUMN snapshot JSONB;
CREATE INDEX evaluations_finished_idx ON evaluations (finished_at);
