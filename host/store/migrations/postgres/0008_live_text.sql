-- tollgate-store schema 8, PostgreSQL flavour (documented in src/lib.rs, "Schema"): the text a running
-- segment has streamed so far, one row per session, overwritten as it grows, so a streamed reply
-- costs one row instead of an event every flush (`Store::put_live_text`, `Store::live_text`).
-- `text` is the segment's text from character `text_offset` on; the text before it was stored as
-- events from seq `from_seq` on (null: none), so a write costs at most a bounded tail, not the
-- whole reply. The row belongs to one claim (`step_id`, `fence`): a write under a stale fence changes nothing,
-- a reader sees the row only while that claim holds its step, and the commit that finishes or
-- requeues the step deletes it.

CREATE TABLE live_text (
    session_id  text    NOT NULL PRIMARY KEY REFERENCES sessions ON DELETE CASCADE,
    row_version bigint NOT NULL,
    step_id     bigint NOT NULL,
    fence       bigint NOT NULL,
    turn_id     text    NOT NULL,
    attempt     bigint NOT NULL,
    text_offset bigint NOT NULL,
    from_seq    bigint,
    text        text    NOT NULL,
    updated_at  bigint NOT NULL
);
