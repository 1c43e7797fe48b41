-- A timed action applied while another timer is in force (a timed hide, then a timed suspend)
-- keeps the timer it displaced: its restore sets the status the new action found and puts the
-- displaced timer back in force, so the earlier timed action still ends (store/evaluations.rs).
-- {"ends_at", "restores_to", "action_id", "set_by"}, as the entity's timer columns held it.
ALTER TABLE actions ADD COLUMN displaced_timer JSONB;
