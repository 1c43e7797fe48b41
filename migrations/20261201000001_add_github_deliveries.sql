-- GitHub-signed requests (X-Hub-Signature-256) carry no signed timestamp: the signature covers
-- the body alone, so a captured request verifies forever. Each accepted one is remembered here,
-- per source, by its X-GitHub-Delivery id and by the SHA-256 of its body (the delivery id is
-- not signed, so a replay may change it; the body it cannot). A later request matching either
-- is answered as a duplicate and writes nothing. Rows are kept for good: retention does not
-- touch this table, since a replay matters however old the original is (SECURITY.md).
CREATE TABLE github_deliveries (
    source text NOT NULL,
    delivery_id text NOT NULL,
    body_sha256 bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, delivery_id),
    UNIQUE (source, body_sha256)
);
