-- tollgate-store schema 3, PostgreSQL flavour (documented in src/lib.rs, "Schema"): who started a
-- session, and the audit trail of decisions.
-- `sessions.started_by` is the principal that created the session (NULL: created before schema 3, or
-- through `Store::create_session`, which names nobody). `audit` is append-only: one row per decision,
-- written in the decision's transaction; the trigger refuses every UPDATE and DELETE, so no code path
-- (and no API call) can change or drop a row. It has no foreign key to `sessions`: the trail outlives them.

ALTER TABLE sessions ADD COLUMN started_by text;

CREATE TABLE audit (
    audit_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    row_version  bigint NOT NULL,
    session_id   text   NOT NULL,
    interrupt_id text   NOT NULL,
    principal    text   NOT NULL,
    decision     text   NOT NULL CHECK (decision IN ('approved', 'rejected')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   bigint NOT NULL
);
CREATE INDEX audit_session ON audit (session_id, audit_id);
CREATE INDEX audit_principal ON audit (principal, audit_id);
CREATE INDEX audit_time ON audit (decided_at, audit_id);

CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit rows are append-only: % refused', TG_OP;
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
