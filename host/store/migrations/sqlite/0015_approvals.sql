-- tollgate-store schema 15, SQLite flavour (documented in src/lib.rs, "Schema", and
-- `AuditLog::resolve_interrupt_as`): an interrupt whose request asks for several approvers
-- (`approvals_required`) keeps the approvals made so far until the last one resolves it.
-- `interrupts.approvals` (JSON text, NULL: none yet) lists them:
-- `[{"principal","client_key","approved_at"}]`.
-- `audit.decision` may now also be `partially_approved` (an approval that counted but did not yet
-- decide). SQLite cannot change a CHECK in place: the table is rebuilt with every row and id kept,
-- as schema 10 did, and its indexes and append-only triggers are made again.

ALTER TABLE interrupts ADD COLUMN approvals text;

DROP TRIGGER audit_no_update;
DROP TRIGGER audit_no_delete;

CREATE TABLE audit_v15 (
    audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    row_version  integer NOT NULL,
    session_id   text    NOT NULL,
    interrupt_id text    NOT NULL,
    principal    text    NOT NULL,
    decision     text    NOT NULL
        CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled',
            'partially_approved')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   integer NOT NULL
);
INSERT INTO audit_v15 (audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at)
    SELECT audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at
    FROM audit ORDER BY audit_id;
DROP TABLE audit;
ALTER TABLE audit_v15 RENAME TO audit;

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
