-- tollgate-store schema 10, PostgreSQL flavour (documented in src/lib.rs, "Schema"): how many of a
-- step's claims were lost. A claim that takes over a step still `claimed` (its lease expired: the
-- Worker that held it died, stalled past its lease or lost the store) adds one to `lost` as well
-- as to `attempt`; a retry or a release does not. The state machine leaves lost claims out of a
-- segment's attempts and bounds them apart (see `Step::lost`).

ALTER TABLE steps ADD COLUMN lost bigint NOT NULL DEFAULT 0;
