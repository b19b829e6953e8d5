-- tollgate-store schema 16, SQLite flavour (documented in src/lib.rs, "Schema", and
-- `AuditLog::mark_checked`): a tool call whose outcome is unknown or that failed needs attention
-- until a person marks it checked. `checked_calls` (PK `(session_id, tool_call_id)`) holds each
-- mark once: who, when, their note. `audit.decision` may now also be `checked` (the row's
-- `interrupt_id` holds the tool call's id); SQLite cannot change a CHECK in place, so the table is
-- rebuilt with every row and id kept, as schemas 10 and 15 did. A partial index finds the calls
-- that need attention.

CREATE TABLE checked_calls (
    session_id   text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    tool_call_id text    NOT NULL,
    row_version  integer NOT NULL,
    checked_by   text    NOT NULL,
    note         text,
    checked_at   integer NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);

CREATE INDEX tool_calls_attention ON tool_calls (updated_at, session_id, tool_call_id)
    WHERE status IN ('outcome_unknown', 'failed');

DROP TRIGGER audit_no_update;
DROP TRIGGER audit_no_delete;

CREATE TABLE audit_v16 (
    audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    row_version  integer NOT NULL,
    session_id   text    NOT NULL,
    interrupt_id text    NOT NULL,
    principal    text    NOT NULL,
    decision     text    NOT NULL
        CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled',
            'partially_approved', 'checked')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   integer NOT NULL
);
INSERT INTO audit_v16 (audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at)
    SELECT audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at
    FROM audit ORDER BY audit_id;
DROP TABLE audit;
ALTER TABLE audit_v16 RENAME TO audit;

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
