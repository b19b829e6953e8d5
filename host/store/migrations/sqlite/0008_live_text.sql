-- tollgate-store schema 8, SQLite flavour (documented in src/lib.rs, "Schema"): the text a running
-- segment has streamed so far, one row per session, overwritten as it grows, so a streamed reply
-- costs one row instead of an event every flush (`Store::put_live_text`, `Store::live_text`).
-- `text` is the segment's text from character `text_offset` on; the text before it was stored as
-- events from seq `from_seq` on (null: none), so a write costs at most a bounded tail, not the
-- whole reply. The row belongs to one claim (`step_id`, `fence`): a write under a stale fence changes nothing,
-- a reader sees the row only while that claim holds its step, and the commit that finishes or
-- requeues the step deletes it.

CREATE TABLE live_text (
    session_id  text    NOT NULL PRIMARY KEY REFERENCES sessions ON DELETE CASCADE,
    row_version integer NOT NULL,
    step_id     integer NOT NULL,
    fence       integer NOT NULL,
    turn_id     text    NOT NULL,
    attempt     integer NOT NULL,
    text_offset integer NOT NULL,
    from_seq    integer,
    text        text    NOT NULL,
    updated_at  integer NOT NULL
);
