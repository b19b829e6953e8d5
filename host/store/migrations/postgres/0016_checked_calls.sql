-- tollgate-store schema 16, PostgreSQL flavour (documented in src/lib.rs, "Schema", and
-- `AuditLog::mark_checked`): a tool call whose outcome is unknown or that failed needs attention
-- until a person marks it checked. `checked_calls` (PK `(session_id, tool_call_id)`) holds each
-- mark once: who, when, their note. `audit.decision` may now also be `checked` (the row's
-- `interrupt_id` holds the tool call's id). A partial index finds the calls that need attention.

CREATE TABLE checked_calls (
    session_id   text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    tool_call_id text    NOT NULL,
    row_version  bigint  NOT NULL,
    checked_by   text    NOT NULL,
    note         text,
    checked_at   bigint  NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);

CREATE INDEX tool_calls_attention ON tool_calls (updated_at, session_id, tool_call_id)
    WHERE status IN ('outcome_unknown', 'failed');

ALTER TABLE audit DROP CONSTRAINT audit_decision_check;
ALTER TABLE audit ADD CONSTRAINT audit_decision_check
    CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled',
        'partially_approved', 'checked'));
