-- tollgate-store schema 9, SQLite flavour (documented in src/lib.rs, "Schema"): each session's CLI
-- transcript kept a second time in the form a resume writes it, so a Worker lays down the
-- `.jsonl` of a long session by copying a few large rows instead of reading and parsing one item
-- per entry.
-- `transcript_chunks` holds one row per commit that appended transcript items (see
-- `Commit::transcript`): `lines` is the JSONL of the entries of those items the commit stored (a
-- repeated item adds nothing), `item_seq` the last of them, `cli_session_id` the CLI session
-- they belong to.
-- `sessions.unchunked` is 1 for the sessions that existed before this schema (their transcript
-- was never chunked; a resume reads their items) and 0 for every later one.

CREATE TABLE transcript_chunks (
    session_id     text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    item_seq       integer    NOT NULL,
    row_version    integer    NOT NULL,
    cli_session_id text    NOT NULL,
    lines          text    NOT NULL,
    created_at     integer    NOT NULL,
    PRIMARY KEY (session_id, item_seq)
);

ALTER TABLE sessions ADD COLUMN unchunked integer NOT NULL DEFAULT 0;
UPDATE sessions SET unchunked = 1;
