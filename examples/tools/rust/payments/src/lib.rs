//! Example tool component: `create_refund`, a non-idempotent write over outbound HTTP.
//!
//! It POSTs the refund to `<PAYMENTS_URL>/refunds` (a config key its manifest grants, and a host
//! its manifest allows) with the call's idempotency key in an `Idempotency-Key` header, so the
//! payments service can drop a repeat. Outcomes: 2xx → the service's answer; 4xx → a refusal the
//! model reads; 5xx or no connection → a retryable error; a request the host denies → failed.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tollgate_guest::http::{HttpError, Request};
use tollgate_guest::{CallError, Context, Output, config, log, tool};

/// The arguments of `create_refund`.
#[derive(Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateRefund {
    /// The order to refund, such as "7".
    order_id: String,
    /// The amount to refund, in cents.
    #[schemars(range(min = 1))]
    amount_cents: u64,
    /// Why, in a few words.
    #[serde(default)]
    #[schemars(with = "String")] // optional, but never null: the same schema as the other languages
    reason: Option<String>,
}

/// Refunds part or all of an order to the customer's original payment method.
#[tool(open_world)]
fn create_refund(args: CreateRefund, cx: &Context) -> Result<Output, CallError> {
    let Some(base) = config::get("PAYMENTS_URL") else {
        return Err(CallError::failed("PAYMENTS_URL is not configured"));
    };
    let Some(key) = cx.idempotency_key() else {
        return Err(CallError::failed("create_refund must run as a deferred call"));
    };
    log::info(format!(
        "refund of {} cents on order {} (attempt {})",
        args.amount_cents,
        args.order_id,
        cx.attempt()
    ));
    let url = format!("{}/refunds", base.trim_end_matches('/'));
    let response = match Request::post(&url).header("Idempotency-Key", key).json(&args)?.send() {
        Ok(response) => response,
        Err(HttpError::Transport(e)) => {
            return Err(CallError::retryable(format!("payments service unreachable: {e}")));
        }
        Err(other) => return Err(CallError::failed(other.to_string())),
    };
    match response.status {
        200..=299 => Ok(Output::text(response.text())),
        400..=499 => Ok(Output::error(format!("refund refused: {}", response.text()))),
        500..=599 => Err(CallError::retryable(format!("payments service returned {}", response.status))),
        status => Err(CallError::failed(format!("payments service returned {status}"))),
    }
}

tollgate_guest::export_tools!(create_refund);
