-- tollgate-store schema 2, SQLite flavour (documented in src/lib.rs, "Schema"): pinned agent bundles.
-- `sessions.agent_digest` is the agent digest the session runs under (NULL: not known, created by an
-- API without an agent); `agent_pinned` (0/1) says only a Worker that loaded that digest may run it.
-- `steps.pin` copies the session's pin onto its steps ('' = any Worker, else the digest) so a
-- Worker's claim stays one index range scan per digest it loaded.

ALTER TABLE sessions ADD COLUMN agent_digest text;
ALTER TABLE sessions ADD COLUMN agent_pinned integer NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN pin text NOT NULL DEFAULT '';
CREATE INDEX steps_due_pin ON steps (pin, due_at) WHERE state IN ('queued', 'claimed');
