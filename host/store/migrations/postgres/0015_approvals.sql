-- tollgate-store schema 15, PostgreSQL flavour (documented in src/lib.rs, "Schema", and
-- `AuditLog::resolve_interrupt_as`): an interrupt whose request asks for several approvers
-- (`approvals_required`) keeps the approvals made so far until the last one resolves it.
-- `interrupts.approvals` (JSON text, NULL: none yet) lists them:
-- `[{"principal","client_key","approved_at"}]`.
-- `audit.decision` may now also be `partially_approved` (an approval that counted but did not yet
-- decide): the CHECK is swapped; rows, ids and the append-only trigger stay as they are.

ALTER TABLE interrupts ADD COLUMN approvals text;

ALTER TABLE audit DROP CONSTRAINT audit_decision_check;
ALTER TABLE audit ADD CONSTRAINT audit_decision_check
    CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled',
        'partially_approved'));
