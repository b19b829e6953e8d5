-- tollgate-store schema 10, SQLite flavour (documented in src/lib.rs, "Schema", and
-- `Store::request_cancel`): a client's request to cancel a session's turn in progress, and the
-- audit trail's `cancelled` decision.
-- `sessions.cancel_requested_by` (a principal; NULL: no request pending) and
-- `sessions.cancel_requested_at` (ms, database clock) hold one pending request per session until
-- the commit that applies or drops it clears both.
-- `audit.decision` may now also be `cancelled` (who cancelled a turn; `interrupt_id` holds the
-- turn's id). SQLite cannot change a CHECK in place: the table is rebuilt with every row and id
-- kept, as schema 5 did, and its indexes and append-only triggers are made again.

ALTER TABLE sessions ADD COLUMN cancel_requested_by text;
ALTER TABLE sessions ADD COLUMN cancel_requested_at integer;

DROP TRIGGER audit_no_update;
DROP TRIGGER audit_no_delete;

CREATE TABLE audit_v10 (
    audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    row_version  integer NOT NULL,
    session_id   text    NOT NULL,
    interrupt_id text    NOT NULL,
    principal    text    NOT NULL,
    decision     text    NOT NULL
        CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   integer NOT NULL
);
INSERT INTO audit_v10 (audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at)
    SELECT audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at
    FROM audit ORDER BY audit_id;
DROP TABLE audit;
ALTER TABLE audit_v10 RENAME TO audit;

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
