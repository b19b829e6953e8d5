-- tollgate-store schema 13, SQLite flavour (documented in src/lib.rs, "Schema"): a session names its
-- agent, and only a Worker serving that agent claims its steps.
-- `sessions.agent_name` is the agent the session belongs to (NULL: created before schema 13 and
-- not adopted yet: no Worker claims it). `steps.agent` copies it onto the session's steps, as
-- `steps.pin` copies the pinned digest, so a Worker's claim is one index range per agent and pin.
-- `agent_digests` holds every (agent name, digest) a Worker or server registered when it started:
-- what `POST /v1/sessions {agent}` resolves, and what an upgrade may pin a session to.
-- `sessions_unnamed` finds the sessions waiting to be adopted (none, once every session names one).

ALTER TABLE sessions ADD COLUMN agent_name text;
ALTER TABLE steps ADD COLUMN agent text NOT NULL DEFAULT '';
DROP INDEX steps_due_pin;
CREATE INDEX steps_due_agent ON steps (agent, pin, due_at) WHERE state IN ('queued', 'claimed');
CREATE INDEX sessions_unnamed ON sessions (session_id) WHERE agent_name IS NULL;

CREATE TABLE agent_digests (
    name          text    NOT NULL,
    digest        text    NOT NULL,
    row_version   integer NOT NULL,
    locked        integer NOT NULL,
    first_seen_at integer  NOT NULL,
    last_seen_at  integer  NOT NULL,
    PRIMARY KEY (name, digest)
);
CREATE INDEX agent_digests_digest ON agent_digests (digest);
