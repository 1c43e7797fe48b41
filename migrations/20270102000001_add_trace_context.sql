-- The W3C trace context (traceparent) an event came in, which its evaluation continues, and the
-- one an action's outbound webhook sends. NULL when the sender sent none (or spans are not
-- exported, for the outbox). Adding a nullable column rewrites no partition.
ALTER TABLE events ADD COLUMN traceparent text;
ALTER TABLE outbox ADD COLUMN traceparent text;
