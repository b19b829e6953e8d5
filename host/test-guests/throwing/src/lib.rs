//! Writes that take effect and then throw: `charge_then_throw`, `credit_then_throw` (idempotent)
//! and `deposit_then_throw` (idempotent) each POST `{order_id, amount_cents, tool, attempt}` to
//! `<PAYMENTS_URL>/refunds` with the call's idempotency key, then read the answer as
//! `{"refund":{"id":…}}`, which the stand-in payments service never sends: the parse error
//! reaches the SDK through `?`, unhandled. The same guest exists in Go, JavaScript and Python
//! (`guest-sdk/*/test-cases/throwing*`). The three names only let one agent give the same handler
//! three policies (single attempt, inline idempotent, deferred idempotent).

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tollgate_guest::http::Request;
use tollgate_guest::{CallError, Context, Output, config, tool};

/// The arguments of every tool here.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Payment {
    /// The order, such as "7".
    order_id: String,
    /// The amount, in cents.
    #[schemars(range(min = 1))]
    amount_cents: u64,
}

#[derive(Serialize)]
struct Sent<'a> {
    order_id: &'a str,
    amount_cents: u64,
    tool: &'a str,
    attempt: u32,
}

/// The answer these tools expect, not the one they get.
#[derive(Deserialize)]
struct Answer {
    refund: Refund,
}

#[derive(Deserialize)]
struct Refund {
    id: String,
}

fn pay_then_throw(tool: &str, args: &Payment, cx: &Context) -> Result<Output, CallError> {
    let Some(base) = config::get("PAYMENTS_URL") else {
        return Err(CallError::failed("PAYMENTS_URL is not configured"));
    };
    let Some(execution) = cx.execution() else {
        return Err(CallError::failed(format!("{tool} must run as a deferred call")));
    };
    let sent =
        Sent { order_id: &args.order_id, amount_cents: args.amount_cents, tool, attempt: execution.attempt };
    let url = format!("{}/refunds", base.trim_end_matches('/'));
    let response =
        Request::post(&url).header("Idempotency-Key", &execution.idempotency_key).json(&sent)?.send()?;
    let answer: Answer = serde_json::from_str(&response.text())?;
    Ok(Output::text(answer.refund.id))
}

/// Charges an order once, then fails reading the answer.
#[tool(open_world)]
fn charge_then_throw(args: Payment, cx: &Context) -> Result<Output, CallError> {
    pay_then_throw("charge_then_throw", &args, cx)
}

/// Credits an order (idempotent under its key), then fails reading the answer.
#[tool(idempotent, open_world)]
fn credit_then_throw(args: Payment, cx: &Context) -> Result<Output, CallError> {
    pay_then_throw("credit_then_throw", &args, cx)
}

/// Deposits to an order (idempotent under its key), then fails reading the answer.
#[tool(idempotent, open_world)]
fn deposit_then_throw(args: Payment, cx: &Context) -> Result<Output, CallError> {
    pay_then_throw("deposit_then_throw", &args, cx)
}

tollgate_guest::export_tools!(charge_then_throw, credit_then_throw, deposit_then_throw);
