-- Distinct actors per signal are counted from the entity's events (only when a rule uses them);
-- retention deletes minute buckets by age.
CREATE INDEX events_entity_signal_actor_idx ON events (entity, signal, actor);
CREATE INDEX signal_buckets_start_idx ON signal_buckets (bucket_start);
