-- tollgate-store schema 9, PostgreSQL flavour (documented in src/lib.rs, "Schema"): each session's CLI
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
    item_seq       bigint    NOT NULL,
    row_version    bigint    NOT NULL,
    cli_session_id text    NOT NULL,
    lines          text    NOT NULL,
    created_at     bigint    NOT NULL,
    PRIMARY KEY (session_id, item_seq)
);

-- A resume reads whole chunks (~40 KB each, stored out of line): lz4 decompresses them several
-- times faster than the default pglz. A server built without lz4 keeps pglz.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE transcript_chunks ALTER COLUMN lines SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    NULL;
END $$;

ALTER TABLE sessions ADD COLUMN unchunked bigint NOT NULL DEFAULT 0;
UPDATE sessions SET unchunked = 1;
