//! The delivery loop: claims due deliveries from the store's outbox, POSTs them signed, and
//! records each result. Runs as its own task in `tollgate serve` and `tollgate api`; a session
//! never waits for it (the outbox rows were written with the events, and only this task reads them).
//!
//! One iteration: claim up to [`MAX_IN_FLIGHT`] minus the sends in flight, each leased for the
//! webhook's timeout + [`LEASE_MARGIN`]; send each as a task; when nothing is due, wait
//! [`POLL`] (or for a send to end, or for the stop). A send's outcome:
//! - 2xx: `delivered`;
//! - anything else (non-2xx, redirect, timeout, connection error): due again after
//!   `retry_initial × 2^(attempt−1)` (capped at [`super::config::MAX_RETRY_DELAY`]) × a jitter
//!   in [0.8, 1.2), or `failed` with the last error once `max_attempts` were made.
//!
//! # Caveats
//!
//! - At stop, sends still in flight after [`STOP_GRACE`] are dropped: their rows keep the lease
//!   and are sent again once it ends (by this process after a restart, or another).
//! - Latency after an event is up to [`POLL`] plus the send (no cross-process wake-up).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinSet;
use tollgate_store::{Delivery, Store, StoreError, Subscription};

use super::config::{MAX_RETRY_DELAY, Webhook};
use super::sign::sign;
use super::{body, message_id};

/// Sends in flight at most, over all webhooks.
pub const MAX_IN_FLIGHT: i64 = 16;
/// How often the loop looks for due deliveries when it has nothing to do.
pub const POLL: Duration = Duration::from_millis(200);
/// The lease beyond the webhook's timeout.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);
/// How long a stop waits for sends in flight.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// The delivery loop of one process.
pub struct Deliverer {
    store: Arc<dyn Store>,
    hooks: Arc<HashMap<String, Webhook>>,
    names: Vec<String>,
    client: reqwest::Client,
    owner: String,
    lease: Duration,
}

/// What one attempt came to.
#[derive(Debug, PartialEq)]
enum Outcome {
    Delivered,
    Failed(String),
    /// Never worth another attempt (the event cannot be made into a message).
    Unsendable(String),
}

impl Deliverer {
    /// Replaces the store's subscriptions with `hooks`' (so events written from now on get
    /// deliveries) and makes the loop.
    ///
    /// # Errors
    /// The store has no outbox or cannot be written.
    pub async fn start(store: Arc<dyn Store>, hooks: Vec<Webhook>) -> anyhow::Result<Self> {
        let outbox = store.outbox().ok_or_else(|| anyhow::anyhow!("this store has no webhook outbox"))?;
        let subscriptions: Vec<Subscription> = hooks
            .iter()
            .map(|h| Subscription {
                webhook: h.name.clone(),
                kinds: h.events.iter().map(|e| e.event_kind().as_str().to_owned()).collect(),
            })
            .collect();
        outbox.subscribe_webhooks(&subscriptions).await?;
        tollgate_api_types::tls::install_crypto_provider();
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
        let lease = hooks.iter().map(|h| h.timeout).max().unwrap_or_default() + LEASE_MARGIN;
        let mut random = [0u8; 4];
        getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        Ok(Deliverer {
            names: hooks.iter().map(|h| h.name.clone()).collect(),
            hooks: Arc::new(hooks.into_iter().map(|h| (h.name.clone(), h)).collect()),
            store,
            client,
            owner: format!("webhooks-{}-{}", std::process::id(), hex::encode(random)),
            lease,
        })
    }

    /// Runs until `stop` turns `true`.
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let me = Arc::new(self);
        let mut sends = JoinSet::new();
        loop {
            if *stop.borrow() {
                break;
            }
            let room = MAX_IN_FLIGHT - i64::try_from(sends.len()).unwrap_or(MAX_IN_FLIGHT);
            let claimed = if room > 0 { me.claim(room).await } else { Ok(Vec::new()) };
            let wait = match claimed {
                Ok(claimed) if !claimed.is_empty() => {
                    for d in claimed {
                        let me = me.clone();
                        sends.spawn(async move { me.deliver(d).await });
                    }
                    continue;
                }
                Ok(_) => POLL,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming webhook deliveries failed; trying again");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                Some(_) = sends.join_next(), if !sends.is_empty() => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        let _ = tokio::time::timeout(STOP_GRACE, async { while sends.join_next().await.is_some() {} }).await;
    }

    async fn claim(&self, limit: i64) -> Result<Vec<Delivery>, StoreError> {
        let outbox = self.store.outbox().expect("checked at start");
        outbox.claim_deliveries(&self.owner, self.lease, &self.names, limit).await
    }

    /// Sends one claimed delivery and records the outcome.
    async fn deliver(&self, d: Delivery) {
        let Some(hook) = self.hooks.get(&d.webhook) else { return };
        if let Some(agents) = &hook.agents {
            let agent = match self.store.session(&d.session_id).await {
                Ok(session) => session.and_then(|s| s.agent_name),
                // The lease runs out and the delivery is claimed again.
                Err(e) => {
                    return tracing::warn!(delivery = d.delivery_id, error = %e, "reading a delivery's session failed");
                }
            };
            if !agent.as_ref().is_some_and(|agent| agents.contains(agent)) {
                // Not this endpoint's agents: done, unsent.
                tracing::debug!(webhook = %hook.name, delivery = d.delivery_id, agent = ?agent, "not for this webhook's agents");
                let outbox = self.store.outbox().expect("checked at start");
                if let Err(e) = outbox.delivered(&d).await {
                    tracing::warn!(delivery = d.delivery_id, error = %e, "recording a skipped webhook delivery failed");
                }
                return;
            }
        }
        let outcome = if d.attempt > hook.max_attempts {
            // Claimed again after a crash mid-send of the last attempt.
            Outcome::Failed(d.last_error.clone().unwrap_or_else(|| "no attempt finished".into()))
        } else {
            self.attempt(hook, &d).await
        };
        let outbox = self.store.outbox().expect("checked at start");
        let recorded = match &outcome {
            Outcome::Delivered => {
                let latency_ms = now_ms() - d.event_at;
                tracing::info!(webhook = %hook.name, delivery = d.delivery_id, attempt = d.attempt, latency_ms,
                    "webhook delivered");
                outbox.delivered(&d).await
            }
            Outcome::Failed(error) if d.attempt < hook.max_attempts => {
                let delay = retry_delay(hook.retry_initial, d.attempt, jitter());
                tracing::warn!(webhook = %hook.name, delivery = d.delivery_id, attempt = d.attempt, %error,
                    retry_in_ms = delay.as_millis(), "webhook delivery failed; retrying");
                outbox.failed(&d, error, Some(delay)).await
            }
            Outcome::Failed(error) | Outcome::Unsendable(error) => {
                tracing::error!(webhook = %hook.name, delivery = d.delivery_id, attempt = d.attempt, %error,
                    "webhook delivery failed for good");
                outbox.failed(&d, error, None).await
            }
        };
        match recorded {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                delivery = d.delivery_id,
                "a webhook delivery's lease was lost; its new holder records it"
            ),
            // The lease runs out and the delivery is sent again: at least once.
            Err(e) => {
                tracing::warn!(delivery = d.delivery_id, error = %e, "recording a webhook delivery failed")
            }
        }
    }

    async fn attempt(&self, hook: &Webhook, d: &Delivery) -> Outcome {
        let body = match body(&d.session_id, d.seq, &d.kind, d.payload.get(), d.event_at) {
            Some(Ok(body)) => body,
            Some(Err(e)) => return Outcome::Unsendable(e),
            None => return Outcome::Unsendable(format!("no webhook event is made from `{}`", d.kind)),
        };
        let id = message_id(&d.session_id, d.seq);
        let timestamp = now_ms() / 1000;
        let signature = sign(&hook.key, &id, timestamp, &body);
        let sent = self
            .client
            .post(hook.url.clone())
            .timeout(hook.timeout)
            .header("content-type", "application/json")
            .header("user-agent", concat!("tollgate-webhooks/", env!("CARGO_PKG_VERSION")))
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => Outcome::Delivered,
            Ok(resp) => {
                let status = resp.status();
                let text = resp.text().await.unwrap_or_default();
                let text: String = text.chars().take(200).collect();
                Outcome::Failed(format!("HTTP {status}: {text}"))
            }
            Err(e) if e.is_timeout() => Outcome::Failed(format!("timed out after {:?}", hook.timeout)),
            Err(e) => Outcome::Failed(error_chain(&e)),
        }
    }
}

/// The delay after failed attempt `attempt` (1-based): `initial × 2^(attempt−1)`, at most
/// [`MAX_RETRY_DELAY`], times `jitter`.
fn retry_delay(initial: Duration, attempt: i64, jitter: f64) -> Duration {
    let exp = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let base = initial.saturating_mul(2u32.saturating_pow(exp)).min(MAX_RETRY_DELAY);
    base.mul_f64(jitter)
}

/// A factor in [0.8, 1.2).
fn jitter() -> f64 {
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    0.8 + 0.4 * f64::from(u16::from_le_bytes(b)) / 65_536.0
}

fn now_ms() -> i64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// An error and its sources, `: `-joined (reqwest's own message hides the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_from_the_initial_delay_up_to_the_cap_with_jitter() {
        let five = Duration::from_secs(5);
        assert_eq!(retry_delay(five, 1, 1.0), five);
        assert_eq!(retry_delay(five, 2, 1.0), Duration::from_secs(10));
        assert_eq!(retry_delay(five, 12, 1.0), Duration::from_secs(10_240));
        assert_eq!(retry_delay(five, 13, 1.0), MAX_RETRY_DELAY);
        assert_eq!(retry_delay(five, 99, 1.0), MAX_RETRY_DELAY);
        assert_eq!(retry_delay(five, 1, 0.8), Duration::from_secs(4));
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.8..1.2).contains(&j), "{j}");
        }
        // The defaults (5 s, 18 attempts) give up about a day after the first attempt.
        let total: Duration =
            (1..super::super::config::DEFAULT_MAX_ATTEMPTS).map(|a| retry_delay(five, a, 1.0)).sum();
        assert!(
            (Duration::from_secs(20 * 3600)..Duration::from_secs(30 * 3600)).contains(&total),
            "{total:?}"
        );
    }
}
