-- An entity's webhooks are delivered one at a time, in the order they were written: a row is
-- claimed only when no earlier row of its entity (and receiver) waits undelivered and not
-- given up. This index answers that question per claimed row; rows without an entity (a
-- rules.demoted, the Transparency Database's statements) are never held back.
CREATE INDEX outbox_pending_entity_idx ON outbox (receiver, (payload ->> 'entity'), id)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
