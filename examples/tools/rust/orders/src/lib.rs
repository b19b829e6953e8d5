//! Example tool component: `lookup_order`, a read-only tool.
//!
//! Orders "1" to "99" exist, all delivered, each costing 600 cents times its number; any other ID
//! is a tool-level error the model reads. The same tool is written in Go, JavaScript and Python
//! under `examples/tools/`, and the cross-language test checks they all answer alike.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tollgate_guest::{Output, tool};

/// The arguments of `lookup_order`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LookupOrder {
    /// The order's ID, such as "7".
    order_id: String,
}

#[derive(Serialize)]
struct Order<'a> {
    order_id: &'a str,
    status: &'static str,
    total_cents: u64,
    currency: &'static str,
}

/// Looks an order up by its ID: its status, total and currency.
#[tool(read_only, idempotent)]
fn lookup_order(args: LookupOrder) -> Result<Output, tollgate_guest::CallError> {
    match args.order_id.parse::<u64>() {
        Ok(n @ 1..=99) if n.to_string() == args.order_id => Output::json(&Order {
            order_id: &args.order_id,
            status: "delivered",
            total_cents: 600 * n,
            currency: "EUR",
        }),
        _ => Ok(Output::error(format!("order {} not found", args.order_id))),
    }
}

tollgate_guest::export_tools!(lookup_order);
