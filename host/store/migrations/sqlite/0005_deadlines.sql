-- tollgate-store schema 5, SQLite flavour (documented in src/lib.rs, "Schema", and src/deadlines.rs):
-- approval deadlines on the database clock, and the audit trail's wider set of decisions.
-- (Number 0005: 0003 is the audit trail's, 0004 the webhook outbox's.)
-- `interrupts.deadline_at` (ms, database clock; NULL: no deadline) is set when the interrupt is
-- inserted, from the relative duration the engine gives; an escalation moves it to the second
-- deadline and sets `escalated_at`. The partial index serves "which open interrupt is due next".
-- `audit.decision` may now also be `escalated` (a deadline handed the call to other approvers),
-- `expired` (a deadline rejected it; principal `tollgate:deadline`) and `revoked` (a session grant
-- was revoked). SQLite cannot change a CHECK in place: the table is rebuilt with every row and
-- id kept (AUTOINCREMENT continues after the highest), and its indexes and append-only triggers
-- are made again. The triggers are dropped first, so the copy's DROP deletes nothing through them.

ALTER TABLE interrupts ADD COLUMN deadline_at integer;
ALTER TABLE interrupts ADD COLUMN escalated_at integer;
CREATE INDEX interrupts_deadline ON interrupts (deadline_at)
    WHERE state = 'open' AND deadline_at IS NOT NULL;

DROP TRIGGER audit_no_update;
DROP TRIGGER audit_no_delete;

CREATE TABLE audit_v5 (
    audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    row_version  integer NOT NULL,
    session_id   text    NOT NULL,
    interrupt_id text    NOT NULL,
    principal    text    NOT NULL,
    decision     text    NOT NULL
        CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   integer NOT NULL
);
INSERT INTO audit_v5 (audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at)
    SELECT audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at
    FROM audit ORDER BY audit_id;
DROP TABLE audit;
ALTER TABLE audit_v5 RENAME TO audit;

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
