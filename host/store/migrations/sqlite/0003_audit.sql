-- tollgate-store schema 3, SQLite flavour (documented in src/lib.rs, "Schema"): who started a session,
-- and the audit trail of decisions.
-- `sessions.started_by` is the principal that created the session (NULL: created before schema 3, or
-- through `Store::create_session`, which names nobody). `audit` is append-only: one row per decision,
-- written in the decision's transaction; the triggers refuse every UPDATE and DELETE, so no code path
-- (and no API call) can change or drop a row. It has no foreign key to `sessions`: the trail outlives them.

ALTER TABLE sessions ADD COLUMN started_by text;

CREATE TABLE audit (
    audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    row_version  integer NOT NULL,
    session_id   text    NOT NULL,
    interrupt_id text    NOT NULL,
    principal    text    NOT NULL,
    decision     text    NOT NULL CHECK (decision IN ('approved', 'rejected')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   integer NOT NULL
);
CREATE INDEX audit_session ON audit (session_id, audit_id);
CREATE INDEX audit_principal ON audit (principal, audit_id);
CREATE INDEX audit_time ON audit (decided_at, audit_id);

CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
    SELECT RAISE(ABORT, 'audit rows are append-only: UPDATE refused');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN
    SELECT RAISE(ABORT, 'audit rows are append-only: DELETE refused');
END;
