-- The audit trail: every human and admin decision (a reversal, an override, a redrive, a rules
-- reload, a shard move, a console sign-in or sign-out), who made it, from where, and the state
-- before and after. Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE; only the
-- retention pass removes rows, through audit_expire, and only rows older than a day.
CREATE TABLE audit_log (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- The name the person gave (the API's `moderator`, the console's sign-in name), or what
    -- acted for nobody in particular (`signal:SIGHUP`, the command line's user).
    actor          TEXT NOT NULL,
    -- How they proved it: `token:<first 8 hex digits of the token's SHA-256>`, `cli`, or
    -- NULL where no token is configured. Never a token.
    credential     TEXT,
    role           TEXT,
    -- The connection's peer address, and the proxy's X-Forwarded-For as it said it.
    address        TEXT,
    forwarded_for  TEXT,
    action         TEXT NOT NULL,
    subject        TEXT NOT NULL,
    before         JSONB,
    after          JSONB
);
CREATE INDEX audit_log_at_idx ON audit_log (at);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);
CREATE INDEX audit_log_subject_idx ON audit_log (subject, id);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('quiesce.audit_expiry', true) = 'on'
       AND OLD.at < now() - interval '1 day' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit trail is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();

-- The retention pass's only way to remove rows: those older than `keep` (at least a day).
CREATE FUNCTION audit_expire(keep interval) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    removed bigint;
BEGIN
    PERFORM set_config('quiesce.audit_expiry', 'on', true);
    DELETE FROM audit_log WHERE at < now() - greatest(keep, interval '1 day');
    GET DIAGNOSTICS removed = ROW_COUNT;
    PERFORM set_config('quiesce.audit_expiry', 'off', true);
    RETURN removed;
END
$$;
