//! Three tools as the README writes them, called through the definitions the attribute generates.

use schemars::JsonSchema;
use serde::Deserialize;
use tollgate_guest::{CallError, Context, Output, tool};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LookupOrder {
    /// The order's ID, such as "7".
    order_id: String,
}

/// Looks an order up by its ID.
///
/// Its status and total.
#[tool(read_only, idempotent)]
fn lookup_order(args: LookupOrder) -> Result<Output, CallError> {
    Ok(Output::text(format!("order {} is delivered", args.order_id)))
}

#[tool(name = "refund", description = "Refunds an order.", destructive, open_world)]
fn create_refund(args: LookupOrder, cx: &tollgate_guest::Context) -> String {
    format!("refunded {} on attempt {}", args.order_id, cx.attempt())
}

/// Says hello.
#[tool]
fn hello() -> &'static str {
    "hello"
}

fn text(result: Result<Output, CallError>) -> String {
    format!("{:?}", result.map(|output| output.content))
}

fn main() {
    let cx = Context::new(None);

    let lookup = lookup_order::TOOL;
    assert_eq!(lookup.name, "lookup_order");
    assert_eq!(lookup.description, "Looks an order up by its ID.\n\nIts status and total.");
    assert!(lookup.annotations.read_only && lookup.annotations.idempotent);
    assert!(!lookup.annotations.destructive && !lookup.annotations.open_world);
    let schema = (lookup.input_schema)();
    assert!(schema.contains(r#""required":["order_id"]"#), "{schema}");
    assert_eq!(text((lookup.handler)(r#"{"order_id":"7"}"#, &cx)), r#"Ok([Text("order 7 is delivered")])"#);
    let wrong = text((lookup.handler)(r#"{"id":"7"}"#, &cx));
    assert!(wrong.contains("the arguments of `lookup_order` do not match its type"), "{wrong}");

    let refund = create_refund::TOOL;
    assert_eq!((refund.name, refund.description), ("refund", "Refunds an order."));
    assert!(refund.annotations.destructive && refund.annotations.open_world && !refund.annotations.read_only);
    assert_eq!(
        text((refund.handler)(r#"{"order_id":"8"}"#, &cx)),
        r#"Ok([Text("refunded 8 on attempt 1")])"#
    );

    let hello = hello::TOOL;
    assert_eq!((hello.name, hello.description), ("hello", "Says hello."));
    assert_eq!(text((hello.handler)("{}", &cx)), r#"Ok([Text("hello")])"#);
}
