//! `record_credit`: an idempotent write over outbound HTTP, for the chaos soak
//! (`host/testing/src/chaos`).
//!
//! It POSTs `{order_id, amount_cents, session_id, tool_call_id, attempt}` to
//! `<PAYMENTS_URL>/credits` with the call's idempotency key in an `Idempotency-Key` header. The
//! body names the call and the attempt (the step's claim, so its fence), so the soak's checker can
//! tell from the payments log alone that every attempt of one call sent the same key, and which
//! claim sent each request. Outcomes as the example `create_refund`: 2xx → the answer; 4xx → a
//! refusal the model reads; 5xx or no connection → retryable.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tollgate_guest::http::{HttpError, Request};
use tollgate_guest::{CallError, Context, Output, config, tool};

/// The arguments of `record_credit`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RecordCredit {
    /// The order the credit note belongs to, such as "7".
    order_id: String,
    /// The credit, in cents.
    #[schemars(range(min = 1))]
    amount_cents: u64,
}

#[derive(Serialize)]
struct Sent<'a> {
    order_id: &'a str,
    amount_cents: u64,
    session_id: &'a str,
    tool_call_id: &'a str,
    attempt: u32,
}

/// Records a store-credit note on an order; repeating it with the same key changes nothing.
#[tool(idempotent, open_world)]
fn record_credit(args: RecordCredit, cx: &Context) -> Result<Output, CallError> {
    let Some(base) = config::get("PAYMENTS_URL") else {
        return Err(CallError::failed("PAYMENTS_URL is not configured"));
    };
    let Some(execution) = cx.execution() else {
        return Err(CallError::failed("record_credit must run as a deferred call"));
    };
    let sent = Sent {
        order_id: &args.order_id,
        amount_cents: args.amount_cents,
        session_id: &execution.session_id,
        tool_call_id: &execution.tool_call_id,
        attempt: execution.attempt,
    };
    let url = format!("{}/credits", base.trim_end_matches('/'));
    let response =
        match Request::post(&url).header("Idempotency-Key", &execution.idempotency_key).json(&sent)?.send() {
            Ok(response) => response,
            Err(HttpError::Transport(e)) => {
                return Err(CallError::retryable(format!("payments service unreachable: {e}")));
            }
            Err(other) => return Err(CallError::failed(other.to_string())),
        };
    match response.status {
        200..=299 => Ok(Output::text(response.text())),
        400..=499 => Ok(Output::error(format!("credit refused: {}", response.text()))),
        500..=599 => Err(CallError::retryable(format!("payments service returned {}", response.status))),
        status => Err(CallError::failed(format!("payments service returned {status}"))),
    }
}

tollgate_guest::export_tools!(record_credit);
