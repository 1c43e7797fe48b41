-- Rules as versions: every published rule set, numbered from 1, with its text, its SHA-256,
-- who published it and why, and (for a candidate published from the Backtest page) the backtest
-- report it was published with. Versions are never changed once written.
CREATE TABLE rules_versions (
    version     BIGINT PRIMARY KEY CHECK (version >= 1),
    text        TEXT NOT NULL,
    -- Hex SHA-256 of `text`.
    hash        TEXT NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    author      TEXT NOT NULL,
    message     TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    backtest    JSONB
);

-- Which version is active, as a history: a publish and a rollback each append one row, and the
-- active version is the newest row's (one read). A rollback is a new row naming an earlier
-- version, so the history keeps both.
CREATE TABLE rules_activations (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    version       BIGINT NOT NULL REFERENCES rules_versions (version),
    -- 'publish', 'rollback' or 'seed' (version 1 from the rules file on an empty table).
    kind          TEXT NOT NULL CHECK (kind IN ('publish', 'rollback', 'seed')),
    author        TEXT NOT NULL,
    message       TEXT NOT NULL,
    activated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The rules version that decided each evaluation and action (NULL: written before versions).
ALTER TABLE evaluations ADD COLUMN rules_version BIGINT;
ALTER TABLE actions ADD COLUMN rules_version BIGINT;
