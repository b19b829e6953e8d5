-- tollgate-store schema 7, SQLite flavour (documented in src/lib.rs, "Schema"): a stored projection of
-- each session's conversation, so a snapshot reads a few small rows instead of the whole item log.
-- `messages` holds one row per message (`role`, `text`), written in the transaction that appends
-- the item it comes from (see `Commit::messages`); when the session's last message has the
-- `merge_key` (an assistant API message's id) of the next part, that part's text is appended to it
-- after a blank line instead.
-- `sessions.unprojected` is 1 for the sessions that existed before this schema (their items were
-- never projected; a reader falls back to the item log for them) and 0 for every later one.
-- `items_kind` serves reads of one kind of item (`Store::read_items_of_kind`).

CREATE TABLE messages (
    session_id  text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    seq         integer    NOT NULL,
    row_version integer    NOT NULL,
    role        text    NOT NULL,
    merge_key   text,
    text        text    NOT NULL,
    item_seq    integer    NOT NULL,
    created_at  integer    NOT NULL,
    PRIMARY KEY (session_id, seq)
);

ALTER TABLE sessions ADD COLUMN unprojected integer NOT NULL DEFAULT 0;
UPDATE sessions SET unprojected = 1;

CREATE INDEX items_kind ON items (session_id, kind, seq);
