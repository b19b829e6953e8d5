-- tollgate-store schema 1, SQLite flavour (documented in src/lib.rs, "Schema").
-- Times are integer milliseconds since the epoch from the DATABASE clock. JSON columns are TEXT and
-- hold the caller's bytes exactly. `row_version` is the format of each row (1 here): a binary reads
-- only rows whose version it knows and refuses the others with a clear error.

CREATE TABLE sessions (
    session_id                text    PRIMARY KEY,
    row_version               integer NOT NULL,
    status                    text    NOT NULL,
    run_state                 text    NOT NULL,
    usage_input_tokens        integer NOT NULL DEFAULT 0,
    usage_cached_input_tokens integer NOT NULL DEFAULT 0,
    usage_output_tokens       integer NOT NULL DEFAULT 0,
    usage_model_calls         integer NOT NULL DEFAULT 0,
    next_item_seq             integer NOT NULL DEFAULT 1,
    next_event_seq            integer NOT NULL DEFAULT 1,
    created_at                integer NOT NULL,
    updated_at                integer NOT NULL
);

CREATE TABLE items (
    session_id  text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    seq         integer NOT NULL,
    row_version integer NOT NULL,
    kind        text    NOT NULL,
    uuid        text,
    turn_id     text,
    body        text    NOT NULL,
    created_at  integer NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX items_uuid ON items (session_id, uuid) WHERE uuid IS NOT NULL;

CREATE TABLE steps (
    step_id      INTEGER PRIMARY KEY,
    session_id   text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    row_version  integer NOT NULL,
    kind         text    NOT NULL,
    payload      text    NOT NULL,
    state        text    NOT NULL,
    interrupt_id text,
    due_at       integer,
    attempt      integer NOT NULL DEFAULT 0,
    fence        integer NOT NULL DEFAULT 0,
    lease_owner  text,
    output       text,
    created_at   integer NOT NULL,
    updated_at   integer NOT NULL
);
CREATE INDEX steps_due ON steps (due_at) WHERE state IN ('queued', 'claimed');
CREATE UNIQUE INDEX steps_in_flight ON steps (session_id) WHERE state IN ('queued', 'claimed', 'waiting');
CREATE INDEX steps_session ON steps (session_id, step_id);

CREATE TABLE events (
    session_id  text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    seq         integer NOT NULL,
    row_version integer NOT NULL,
    kind        text    NOT NULL,
    payload     text    NOT NULL,
    step_id     integer,
    fence       integer,
    created_at  integer NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE interrupts (
    session_id   text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    interrupt_id text    NOT NULL,
    row_version  integer NOT NULL,
    state        text    NOT NULL,
    request      text    NOT NULL,
    resolution   text,
    client_key   text,
    created_at   integer NOT NULL,
    resolved_at  integer,
    PRIMARY KEY (session_id, interrupt_id)
);
CREATE INDEX interrupts_open ON interrupts (created_at, session_id, interrupt_id) WHERE state = 'open';

CREATE TABLE tool_calls (
    session_id   text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    tool_call_id text    NOT NULL,
    row_version  integer NOT NULL,
    status       text    NOT NULL,
    record       text    NOT NULL,
    created_at   integer NOT NULL,
    updated_at   integer NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);

CREATE TABLE idempotency_keys (
    session_id text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    operation  text    NOT NULL,
    client_key text    NOT NULL,
    request    text    NOT NULL,
    response   text    NOT NULL,
    created_at integer NOT NULL,
    PRIMARY KEY (session_id, operation, client_key)
);
