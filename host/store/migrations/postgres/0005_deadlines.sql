-- tollgate-store schema 5, PostgreSQL flavour (documented in src/lib.rs, "Schema", and
-- src/deadlines.rs): approval deadlines on the database clock, and the audit trail's wider set of
-- decisions. (Number 0005: 0003 is the audit trail's, 0004 the webhook outbox's.)
-- `interrupts.deadline_at` (ms, database clock; NULL: no deadline) is set when the interrupt is
-- inserted, from the relative duration the engine gives; an escalation moves it to the second
-- deadline and sets `escalated_at`. The partial index serves "which open interrupt is due next".
-- `audit.decision` may now also be `escalated`, `expired` (principal `tollgate:deadline`) and
-- `revoked` (a session grant was revoked): the CHECK is swapped; rows, ids and the append-only
-- trigger stay as they are.

ALTER TABLE interrupts ADD COLUMN deadline_at bigint, ADD COLUMN escalated_at bigint;
CREATE INDEX interrupts_deadline ON interrupts (deadline_at)
    WHERE state = 'open' AND deadline_at IS NOT NULL;

ALTER TABLE audit DROP CONSTRAINT audit_decision_check;
ALTER TABLE audit ADD CONSTRAINT audit_decision_check
    CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked'));
