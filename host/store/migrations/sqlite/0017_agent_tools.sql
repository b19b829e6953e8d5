-- tollgate-store schema 17, SQLite flavour (documented in src/lib.rs, "Schema", and
-- `AgentRegistry::publish_tools`): the custom tools a Worker loaded from a bundle, published for
-- the processes that never load one (`tollgate api` serving `/mcp/{agent}`). `agent_digests.tools`
-- is a JSON array (text, the writer's bytes) of each tool's name, description, input schema,
-- annotations and resolved policy; NULL until a Worker of this build publishes it.

ALTER TABLE agent_digests ADD COLUMN tools text;
