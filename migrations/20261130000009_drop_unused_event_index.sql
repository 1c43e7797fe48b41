-- No query reads events by (entity, received_at): per-entity reads use
-- events_entity_signal_actor_idx (entity first) and retention uses events_received_idx. The
-- index cost one more index insertion per ingested event.
DROP INDEX IF EXISTS events_entity_idx;
