-- tollgate-store schema 10, PostgreSQL flavour (documented in src/lib.rs, "Schema", and
-- `Store::request_cancel`): a client's request to cancel a session's turn in progress, and the
-- audit trail's `cancelled` decision.
-- `sessions.cancel_requested_by` (a principal; NULL: no request pending) and
-- `sessions.cancel_requested_at` (ms, database clock) hold one pending request per session until
-- the commit that applies or drops it clears both.
-- `audit.decision` may now also be `cancelled` (who cancelled a turn; `interrupt_id` holds the
-- turn's id): the CHECK is swapped; rows, ids and the append-only trigger stay as they are.

ALTER TABLE sessions ADD COLUMN cancel_requested_by text, ADD COLUMN cancel_requested_at bigint;

ALTER TABLE audit DROP CONSTRAINT audit_decision_check;
ALTER TABLE audit ADD CONSTRAINT audit_decision_check
    CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled'));
