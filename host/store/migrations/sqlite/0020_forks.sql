-- tollgate-store schema 20, SQLite flavour (documented in src/lib.rs, "Schema", and `Store::fork_session`):
-- a fork is a session whose history is another's up to the end of one of its turns, shared, not
-- copied.
-- `forks` holds one row per fork: the session it was forked from (`parent_id`), the turn, the cut
-- (`through_item_seq`: its items up to that seq are the parent's; `through_message_seq` the same
-- for the conversation's projection), whether it is dry, who forked it and when.
-- `fork_history` says where a session's inherited history lives: items (and transcript chunks)
-- with seq in (`after_seq`, `through_seq`], and messages with seq in (`after_message_seq`,
-- `through_message_seq`], are those of `source_id`. A fork of a fork gets its parent's ranges cut at
-- its own cut plus one range of its parent's own rows, so a read never walks a chain, and a fork
-- inserts as many ranges as its lineage is deep, however long the history is.
-- Every read of items, uuids, messages, transcript chunks and media reads through these ranges.
-- A session a fork names or reads from cannot be deleted (`ON DELETE RESTRICT`); deleting a fork
-- deletes its rows here.
-- `audit.decision` may now also be `forked` (the row's session is the fork, its `interrupt_id` the
-- turn forked at); SQLite cannot change a CHECK in place, so the table is rebuilt with every row
-- and id kept, as schemas 10, 15 and 16 did.

CREATE TABLE forks (
    session_id          text    NOT NULL PRIMARY KEY REFERENCES sessions ON DELETE CASCADE,
    row_version         integer NOT NULL,
    parent_id           text    NOT NULL REFERENCES sessions ON DELETE RESTRICT,
    turn                integer NOT NULL,
    through_item_seq    integer NOT NULL,
    through_message_seq integer NOT NULL,
    dry                 integer NOT NULL,
    forked_by           text    NOT NULL,
    created_at          integer NOT NULL
);
CREATE INDEX forks_parent ON forks (parent_id);

CREATE TABLE fork_history (
    session_id          text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    through_seq         integer NOT NULL,
    row_version         integer NOT NULL,
    source_id           text    NOT NULL REFERENCES sessions ON DELETE RESTRICT,
    after_seq           integer NOT NULL,
    after_message_seq   integer NOT NULL,
    through_message_seq integer NOT NULL,
    PRIMARY KEY (session_id, through_seq)
);
CREATE INDEX fork_history_source ON fork_history (source_id);

DROP TRIGGER audit_no_update;
DROP TRIGGER audit_no_delete;

CREATE TABLE audit_v20 (
    audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    row_version  integer NOT NULL,
    session_id   text    NOT NULL,
    interrupt_id text    NOT NULL,
    principal    text    NOT NULL,
    decision     text    NOT NULL
        CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled',
            'partially_approved', 'checked', 'forked')),
    reason       text,
    tool_name    text,
    input        text,
    edited_input text,
    decided_at   integer NOT NULL
);
INSERT INTO audit_v20 (audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at)
    SELECT audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
        tool_name, input, edited_input, decided_at
    FROM audit ORDER BY audit_id;
DROP TABLE audit;
ALTER TABLE audit_v20 RENAME TO audit;

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
