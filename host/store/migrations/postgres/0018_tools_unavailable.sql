-- tollgate-store schema 18, PostgreSQL flavour (documented in src/lib.rs, "Schema", and
-- `AgentRegistry::report_unavailable_tools`): the tool components of an agent that a Worker could
-- not load at its last look at `tools/`, for the processes that never load the bundle
-- (`tollgate api`'s `/healthz`, `/metrics` and inbox). One row per (agent, Worker) while that
-- Worker has any: `components` is a JSON array (text) of each component's name, reason and
-- whether its last good build serves; `changed_at` is when that list last changed,
-- `reported_at` when the Worker last confirmed it (a Worker that stopped without saying so is
-- read as gone once its report is older than the reader's bound). A Worker with none has no row.

CREATE TABLE tools_unavailable (
    agent       text    NOT NULL,
    worker      text    NOT NULL,
    row_version bigint  NOT NULL,
    digest      text    NOT NULL,
    components  text    NOT NULL,
    changed_at  bigint  NOT NULL,
    reported_at bigint  NOT NULL,
    PRIMARY KEY (agent, worker)
);
