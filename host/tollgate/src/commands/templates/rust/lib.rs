//! The `{{name}}` tool. Build it into ../../tools/ with `tollgate build` in the agent's folder;
//! try it with `tollgate tools call . {{name}} '{"text": "world"}'`.

use schemars::JsonSchema;
use serde::Deserialize;
use tollgate_guest::{Output, tool};

/// The arguments of `{{name}}`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Who or what to greet.
    text: String,
}

/// Greets: answers with the text it was given.
#[tool(read_only, idempotent)]
fn {{name}}(args: Args) -> Result<Output, tollgate_guest::CallError> {
    Ok(Output::text(format!("hello, {}", args.text)))
}

tollgate_guest::export_tools!({{name}});
