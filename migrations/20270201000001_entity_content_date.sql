-- The day an entity's content was posted, as its sender gave it: the latest `content_date`
-- attribute of its events, folded here like its author (store/fold.rs); a snapshot adds the
-- events not folded yet. A statement of reasons' `content_date` is this, else the day of the
-- entity's first event (its row's `created_at`). Text as sent (checked at ingest, YYYY-MM-DD),
-- read by quiesce, never cast here: a value written before the check cannot fail a fold.
ALTER TABLE entities ADD COLUMN content_date TEXT;
