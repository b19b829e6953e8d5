//! The webhook outbox: deliveries written with the events they announce, claimed under a lease,
//! retried, and finished once. Read [`Outbox`] first; a backend's is [`crate::Store::outbox`].
//!
//! # Design: written with the event, never derived later
//!
//! Which webhook wants which event kind is data ([`Outbox::subscribe_webhooks`], table
//! `webhook_subscriptions`), written by the process that delivers. A trigger on `events`
//! (migration 0004) inserts one `webhook_deliveries` row per subscribed webhook **in the
//! transaction that appends the event**, so an event and its deliveries commit together or not
//! at all, whoever writes it: the API (a decision) or a Worker in another process (an interrupt,
//! a turn's end) that knows nothing of webhooks. Nothing reads the event log afterwards, so no
//! cursor can skip an event committed out of order, and a crash cannot lose a delivery.
//!
//! A delivery is `pending` until it is `delivered` or `failed`. [`Outbox::claim_deliveries`]
//! leases due ones (it moves `due_at` to DB-now + lease and counts the attempt, which is the
//! claim's fence): a process that dies mid-send loses its lease and another claim (or the same
//! process after a restart) sends the delivery again. A result is written only under the claim's
//! fence, so a stale sender changes nothing, and a delivered row is never claimed again. That is
//! at least once: a receiver may see a delivery twice (a crash after its 2xx, before the row was
//! marked), and dedupes by the `webhook-id` the sender derives from the event.
//!
//! # Caveats
//!
//! - Only events appended after a webhook subscribed to their kind get deliveries.
//! - Deliveries of a webhook no longer configured stay `pending`; no process claims them (a
//!   claim names the webhooks its process sends to).
//! - Clock expressions are repeated from `dialect.rs` (the outbox keeps its statements apart).

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::value::RawValue;
use sqlx::Row;
use tollgate_store_macros::sqlx_bounds;

use crate::backend::{Backend, ms};
use crate::dialect::Dialect;
use crate::error::{check_row_version, stored_json};
use crate::{ROW_VERSION, StoreError};

/// Which event kinds one webhook receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// The webhook's name (unique in the configuration).
    pub webhook: String,
    /// The store's event kinds (e.g. `interrupt_opened`) it receives.
    pub kinds: Vec<String>,
}

/// Where a delivery is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryState {
    /// Waiting to be sent (again), or being sent under a lease.
    Pending,
    /// A receiver answered 2xx. Final.
    Delivered,
    /// Gave up after the last attempt. Final.
    Failed,
}

impl DeliveryState {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(Self::Pending),
            "delivered" => Some(Self::Delivered),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// One event for one webhook.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The row's id.
    pub delivery_id: i64,
    /// The webhook's name.
    pub webhook: String,
    /// The event's session.
    pub session_id: String,
    /// The event's seq in its session.
    pub seq: i64,
    /// The event's kind.
    pub kind: String,
    /// The event's payload, byte-exact.
    pub payload: Box<RawValue>,
    /// When the event was written (ms, database clock).
    pub event_at: i64,
    /// Where it is.
    pub state: DeliveryState,
    /// Claims so far; for a claimed delivery, this claim's number and its fence.
    pub attempt: i64,
    /// For a claimed delivery its lease's end, else when it is due (ms, database clock).
    pub due_at: i64,
    /// The last failed attempt's error.
    pub last_error: Option<String>,
}

/// The webhook outbox (see the module doc). `Send + Sync`.
///
/// # Contract (both backends; checked by `testing::outbox` (feature `testing`))
///
/// - An event appended with a subscribed kind has one `pending` delivery per subscribed webhook,
///   committed with it; an event whose transaction rolled back has none.
/// - [`Outbox::claim_deliveries`] takes due pending deliveries of the named webhooks, oldest due
///   first, leases them until DB-now + `lease` and increments `attempt`; concurrent claimers
///   never get the same delivery while its lease runs (PostgreSQL: `SKIP LOCKED`).
/// - [`Outbox::delivered`] and [`Outbox::failed`] write only under the claim's `attempt`, on a
///   pending row: `Ok(false)` and nothing written for a stale claim. A delivered or failed row is
///   never claimed again.
#[async_trait::async_trait]
pub trait Outbox: Send + Sync {
    /// Replaces every subscription with `subscriptions`, in one transaction.
    async fn subscribe_webhooks(&self, subscriptions: &[Subscription]) -> Result<(), StoreError>;

    /// Claims up to `limit` due pending deliveries of `webhooks` for `owner`, leased for `lease`.
    async fn claim_deliveries(
        &self,
        owner: &str,
        lease: Duration,
        webhooks: &[String],
        limit: i64,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Marks a claimed delivery delivered; `Ok(false)` (nothing written) when the claim is stale.
    async fn delivered(&self, claimed: &Delivery) -> Result<bool, StoreError>;

    /// Records a failed attempt of a claimed delivery: due again after `retry_in`, or `failed`
    /// for good when `None`. `Ok(false)` (nothing written) when the claim is stale.
    async fn failed(
        &self,
        claimed: &Delivery,
        error: &str,
        retry_in: Option<Duration>,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` deliveries with an id above `after`, in id order (any state).
    async fn deliveries(&self, after: i64, limit: i64) -> Result<Vec<Delivery>, StoreError>;
}

/// The outbox's statements in one dialect.
pub(crate) struct OutboxStatements {
    delete_subscriptions: &'static str,
    insert_subscription: &'static str,
    claim: &'static str,
    delivered: &'static str,
    retry: &'static str,
    give_up: &'static str,
    list: &'static str,
}

const COLUMNS: &str = "delivery_id, row_version, webhook, session_id, seq, kind, payload, event_at, state, \
                       attempts, due_at, last_error";

impl OutboxStatements {
    fn render(now: &str, claim: String) -> Self {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        OutboxStatements {
            delete_subscriptions: "DELETE FROM webhook_subscriptions",
            insert_subscription: "INSERT INTO webhook_subscriptions (kind, webhook) VALUES ($1, $2) \
                                  ON CONFLICT DO NOTHING",
            claim: leak(claim),
            delivered: leak(format!(
                "UPDATE webhook_deliveries SET state = 'delivered', lease_owner = NULL, finished_at = {now},
                     updated_at = {now}
                 WHERE delivery_id = $1 AND attempts = $2 AND state = 'pending'"
            )),
            retry: leak(format!(
                "UPDATE webhook_deliveries SET due_at = {now} + $3, last_error = $4, lease_owner = NULL,
                     updated_at = {now}
                 WHERE delivery_id = $1 AND attempts = $2 AND state = 'pending'"
            )),
            give_up: leak(format!(
                "UPDATE webhook_deliveries SET state = 'failed', last_error = $3, lease_owner = NULL,
                     finished_at = {now}, updated_at = {now}
                 WHERE delivery_id = $1 AND attempts = $2 AND state = 'pending'"
            )),
            list: leak(format!(
                "SELECT {COLUMNS} FROM webhook_deliveries WHERE delivery_id > $1 ORDER BY delivery_id LIMIT $2"
            )),
        }
    }
}

/// A dialect's outbox statements, rendered once.
pub(crate) trait OutboxDialect: Dialect {
    fn outbox() -> &'static OutboxStatements;
}

impl OutboxDialect for sqlx::Sqlite {
    fn outbox() -> &'static OutboxStatements {
        static SQLITE: LazyLock<OutboxStatements> = LazyLock::new(|| {
            let now = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
            // One statement: SQLite holds the write lock from the sub-select to the update.
            let claim = format!(
                "UPDATE webhook_deliveries SET lease_owner = $1, due_at = {now} + $2,
                     attempts = attempts + 1, updated_at = {now}
                 WHERE delivery_id IN (SELECT delivery_id FROM webhook_deliveries
                     WHERE state = 'pending' AND due_at <= {now} AND row_version <= $3
                         AND webhook IN (SELECT value FROM json_each($4))
                     ORDER BY due_at LIMIT $5)
                 RETURNING {COLUMNS}"
            );
            OutboxStatements::render(now, claim)
        });
        &SQLITE
    }
}

impl OutboxDialect for sqlx::Postgres {
    fn outbox() -> &'static OutboxStatements {
        static POSTGRES: LazyLock<OutboxStatements> = LazyLock::new(|| {
            let now = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
            // Claimers never wait on each other's candidates (`SKIP LOCKED`): with several API
            // processes, each delivery goes to one of them while its lease runs.
            let returning = COLUMNS.split(", ").map(|c| format!("d.{c}")).collect::<Vec<_>>().join(", ");
            let claim = format!(
                "WITH c AS (
                     SELECT delivery_id FROM webhook_deliveries
                     WHERE state = 'pending' AND due_at <= {now} AND row_version <= $3
                         AND webhook = ANY(ARRAY(SELECT jsonb_array_elements_text($4::jsonb)))
                     ORDER BY due_at LIMIT $5
                     FOR UPDATE SKIP LOCKED)
                 UPDATE webhook_deliveries d SET lease_owner = $1, due_at = {now} + $2,
                     attempts = d.attempts + 1, updated_at = {now}
                 FROM c WHERE d.delivery_id = c.delivery_id
                 RETURNING {returning}"
            );
            OutboxStatements::render(now, claim)
        });
        &POSTGRES
    }
}

#[sqlx_bounds(DB)]
fn decode<DB>(row: &DB::Row) -> Result<Delivery, StoreError>
where
    DB: sqlx::Database,
{
    let delivery_id: i64 = row.try_get("delivery_id")?;
    let key = delivery_id.to_string();
    check_row_version("webhook_deliveries", &key, row.try_get("row_version")?)?;
    let state: String = row.try_get("state")?;
    let state = DeliveryState::parse(&state).ok_or_else(|| StoreError::Corrupt {
        table: "webhook_deliveries",
        key: key.clone(),
        detail: format!("unknown state `{state}`"),
    })?;
    Ok(Delivery {
        payload: stored_json("webhook_deliveries", &key, "payload", row.try_get("payload")?)?,
        delivery_id,
        webhook: row.try_get("webhook")?,
        session_id: row.try_get("session_id")?,
        seq: row.try_get("seq")?,
        kind: row.try_get("kind")?,
        event_at: row.try_get("event_at")?,
        state,
        attempt: row.try_get("attempts")?,
        due_at: row.try_get("due_at")?,
        last_error: row.try_get("last_error")?,
    })
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> Outbox for B
where
    B: Backend<Db = DB>,
    DB: OutboxDialect,
{
    async fn subscribe_webhooks(&self, subscriptions: &[Subscription]) -> Result<(), StoreError> {
        let sql = DB::outbox();
        let mut tx = self.begin_write().await?;
        sqlx::query(sql.delete_subscriptions).execute(&mut *tx).await?;
        for s in subscriptions {
            for kind in &s.kinds {
                sqlx::query(sql.insert_subscription)
                    .bind(kind.as_str())
                    .bind(s.webhook.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        lease: Duration,
        webhooks: &[String],
        limit: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        if webhooks.is_empty() {
            return Ok(Vec::new());
        }
        let names = serde_json::to_string(webhooks).expect("strings serialize");
        let rows = sqlx::query(DB::outbox().claim)
            .bind(owner)
            .bind(ms(lease))
            .bind(ROW_VERSION)
            .bind(names.as_str())
            .bind(limit)
            .fetch_all(self.write_pool())
            .await?;
        let mut claimed = rows.iter().map(decode::<DB>).collect::<Result<Vec<_>, _>>()?;
        claimed.sort_by_key(|d| d.delivery_id);
        Ok(claimed)
    }

    async fn delivered(&self, claimed: &Delivery) -> Result<bool, StoreError> {
        let done = sqlx::query(DB::outbox().delivered)
            .bind(claimed.delivery_id)
            .bind(claimed.attempt)
            .execute(self.write_pool())
            .await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn failed(
        &self,
        claimed: &Delivery,
        error: &str,
        retry_in: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let sql = DB::outbox();
        let query = match retry_in {
            Some(delay) => sqlx::query(sql.retry)
                .bind(claimed.delivery_id)
                .bind(claimed.attempt)
                .bind(ms(delay))
                .bind(error),
            None => sqlx::query(sql.give_up).bind(claimed.delivery_id).bind(claimed.attempt).bind(error),
        };
        let done = query.execute(self.write_pool()).await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn deliveries(&self, after: i64, limit: i64) -> Result<Vec<Delivery>, StoreError> {
        let rows = sqlx::query(DB::outbox().list).bind(after).bind(limit).fetch_all(self.read_pool()).await?;
        rows.iter().map(decode::<DB>).collect()
    }
}
