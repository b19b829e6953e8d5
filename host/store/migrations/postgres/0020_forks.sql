-- tollgate-store schema 20, PostgreSQL flavour (documented in src/lib.rs, "Schema", and
-- `Store::fork_session`): a fork is a session whose history is another's up to the end of one of
-- its turns, shared, not copied.
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
-- turn forked at).

CREATE TABLE forks (
    session_id          text    NOT NULL PRIMARY KEY REFERENCES sessions ON DELETE CASCADE,
    row_version         bigint  NOT NULL,
    parent_id           text    NOT NULL REFERENCES sessions ON DELETE RESTRICT,
    turn                bigint  NOT NULL,
    through_item_seq    bigint  NOT NULL,
    through_message_seq bigint  NOT NULL,
    dry                 boolean NOT NULL,
    forked_by           text    NOT NULL,
    created_at          bigint  NOT NULL
);
CREATE INDEX forks_parent ON forks (parent_id);

CREATE TABLE fork_history (
    session_id          text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    through_seq         bigint  NOT NULL,
    row_version         bigint  NOT NULL,
    source_id           text    NOT NULL REFERENCES sessions ON DELETE RESTRICT,
    after_seq           bigint  NOT NULL,
    after_message_seq   bigint  NOT NULL,
    through_message_seq bigint  NOT NULL,
    PRIMARY KEY (session_id, through_seq)
);
CREATE INDEX fork_history_source ON fork_history (source_id);

ALTER TABLE audit DROP CONSTRAINT audit_decision_check;
ALTER TABLE audit ADD CONSTRAINT audit_decision_check
    CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked', 'cancelled',
        'partially_approved', 'checked', 'forked'));
