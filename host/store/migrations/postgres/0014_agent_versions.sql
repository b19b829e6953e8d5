-- tollgate-store schema 14, PostgreSQL flavour (documented in src/lib.rs, "Schema"): agents' versions in
-- the store, so a Worker needs no agent folder (`versions::AgentVersions`).
-- `bundle_files` holds each file of any pushed bundle once, by `sha256:` digest of its bytes (the
-- store computes it). `agent_versions` is version N@k: its agent digest, its files (a JSON object
-- of path -> file digest), who pushed it and when; a version never changes, and one (name, digest)
-- is one version. `agent_current` is what new sessions of the agent get, the version before it
-- (what a rollback returns to), and a canary: a version that `canary_share` percent of new sessions
-- get instead.

CREATE TABLE bundle_files (
    digest      text   NOT NULL PRIMARY KEY,
    row_version bigint NOT NULL,
    size        bigint NOT NULL,
    data        bytea  NOT NULL,
    created_at  bigint NOT NULL
);

CREATE TABLE agent_versions (
    name        text   NOT NULL,
    version     bigint NOT NULL,
    row_version bigint NOT NULL,
    digest      text   NOT NULL,
    files       text   NOT NULL,
    pushed_by   text   NOT NULL,
    pushed_at   bigint NOT NULL,
    PRIMARY KEY (name, version),
    UNIQUE (name, digest)
);

CREATE TABLE agent_current (
    name        text   NOT NULL PRIMARY KEY,
    row_version bigint NOT NULL,
    version     bigint NOT NULL,
    previous    bigint,
    canary      bigint,
    canary_share bigint,
    updated_at  bigint NOT NULL
);
