-- When the evaluated entity fell due (its fire-at in Redis): started_at - due_at is the fire
-- delay of that evaluation, which the load generator reports per run.
ALTER TABLE evaluations ADD COLUMN due_at TIMESTAMPTZ;
