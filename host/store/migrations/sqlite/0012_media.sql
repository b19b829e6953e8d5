-- tollgate-store schema 10, SQLite flavour (documented in src/lib.rs, "Schema"): images, stored once
-- per session by digest instead of inside every transcript entry, record and message that holds
-- them (`media::MediaStore`).
-- `media` holds one row per (session, digest): `digest` is `sha256:` and the hex SHA-256 of
-- `data` (the store computes it), `size` the bytes' length.
-- `messages.images` is the JSON array of a message's images by reference (null: none), written
-- with the message and never merged.

CREATE TABLE media (
    session_id  text    NOT NULL REFERENCES sessions ON DELETE CASCADE,
    digest      text    NOT NULL,
    row_version integer NOT NULL,
    media_type  text    NOT NULL,
    size        integer NOT NULL,
    data        blob    NOT NULL,
    created_at  integer NOT NULL,
    PRIMARY KEY (session_id, digest)
);

ALTER TABLE messages ADD COLUMN images text;
