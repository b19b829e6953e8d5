//! Images, stored once per session by digest: the [`MediaStore`] trait, implemented once for
//! both backends beside the shared [`crate::Store`] implementation, and reached from any store
//! through [`crate::Store::media`].
//!
//! Read [`MediaStore`] first. A row is keyed by (session, digest), the digest being `sha256:` and
//! the hex SHA-256 of the bytes, which the store computes: the same bytes stored twice for a
//! session are one row, and a digest always names the bytes it was computed from. Rows belong to
//! their session (they go when it goes) and are never changed.
//!
//! It does not know where images are referenced (transcript entries, records, messages: the
//! `tollgate` crate's media module writes and reads those references) and does not check what
//! the bytes are: media types are opaque strings to it, like everything else in the store.
//!
//! # Caveats
//!
//! - [`MediaStore::put_media`] commits in its own transaction, before the rows that reference its
//!   images: a later commit that fails leaves a row nothing references (the same bytes are the
//!   same row when the attempt runs again). A user message's images go with the message
//!   ([`MediaStore::send_user_message_with_media`]): both or neither.
//! - One image is at most [`MAX_MEDIA_BYTES`].

use std::sync::LazyLock;

use sha2::{Digest, Sha256};
use sqlx::{Row, Transaction};
use tollgate_store_macros::sqlx_bounds;

use crate::backend::{Backend, Sql};
use crate::dialect::Dialect;
use crate::error::check_row_version;
use crate::*;

/// The largest image a row holds, in bytes.
pub const MAX_MEDIA_BYTES: usize = 8 * 1024 * 1024;

/// An image to store: its media type and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMedia {
    /// `image/png`, … (1 to 255 bytes).
    pub media_type: String,
    /// The bytes (1 to [`MAX_MEDIA_BYTES`]).
    pub data: Vec<u8>,
}

impl NewMedia {
    /// The digest the store keys these bytes by: `sha256:` and 64 lowercase hex digits.
    pub fn digest(&self) -> String {
        digest_of(&self.data)
    }
}

/// `sha256:` and the 64 lowercase hex digits of `data`'s SHA-256.
pub fn digest_of(data: &[u8]) -> String {
    let hash = Sha256::digest(data);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in hash {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// A stored image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Media {
    /// Its session.
    pub session_id: String,
    /// `sha256:…` of `data`.
    pub digest: String,
    /// Its media type, as given.
    pub media_type: String,
    /// The bytes.
    pub data: Vec<u8>,
    /// When it was first stored (database clock, ms).
    pub created_at: i64,
}

/// Images on the same database as the sessions.
///
/// # Contract (checked by `testing::conformance` on both backends)
///
/// - [`MediaStore::put_media`] stores each image under its session and digest once, committed
///   before `Ok`; storing the same bytes again writes nothing and returns the same digest. An
///   unknown session is [`StoreError::SessionNotFound`]; an empty or oversized image, or an empty
///   media type, is [`StoreError::Invalid`]; nothing is stored then.
/// - [`MediaStore::media`] returns `Ok(None)` for a digest the session does not hold, whichever
///   session holds it; a fork holds the images of the sessions its history reads from
///   ([`crate::Store::fork_session`]), and the row returned names the session that stored it.
/// - [`MediaStore::send_user_message_with_media`] is [`Store::send_user_message`] with the images
///   stored in the same transaction: both or neither; a replay (same client key and message)
///   stores nothing.
#[async_trait::async_trait]
pub trait MediaStore: Send + Sync {
    /// Stores `media` for `session_id` and returns their digests, in order.
    async fn put_media(&self, session_id: &str, media: &[NewMedia]) -> Result<Vec<String>, StoreError>;

    /// The image `digest` of `session_id`, or `Ok(None)`.
    async fn media(&self, session_id: &str, digest: &str) -> Result<Option<Media>, StoreError>;

    /// [`Store::send_user_message`], storing the message's images with it.
    async fn send_user_message_with_media(
        &self,
        message: UserMessage,
        media: &[NewMedia],
    ) -> Result<MessageReceipt, StoreError>;
}

/// The media statements (the same text on both backends but for the clock), rendered once.
struct MediaStatements {
    /// Inserts `$1` session, `$2` digest, `$3` row version, `$4` media type, `$5` size, `$6` data
    /// unless the row exists.
    insert: &'static str,
    /// The image of session `$1` with digest `$2`: its own, else one a session its history reads
    /// from holds (a fork's).
    select: &'static str,
}

fn statements<DB: Dialect>() -> &'static MediaStatements {
    fn render(now: &str) -> MediaStatements {
        MediaStatements {
            insert: format!(
                "INSERT INTO media (session_id, digest, row_version, media_type, size, data, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, {now}) ON CONFLICT (session_id, digest) DO NOTHING"
            )
            .leak(),
            select: "SELECT session_id, digest, row_version, media_type, data, created_at FROM media
                 WHERE session_id = $1 AND digest = $2
                 UNION ALL
                 SELECT m.session_id, m.digest, m.row_version, m.media_type, m.data, m.created_at
                 FROM fork_history h JOIN media m ON m.session_id = h.source_id AND m.digest = $2
                 WHERE h.session_id = $1
                 LIMIT 1",
        }
    }
    static SQLITE: LazyLock<MediaStatements> = LazyLock::new(|| render(<sqlx::Sqlite as Dialect>::NOW));
    static POSTGRES: LazyLock<MediaStatements> = LazyLock::new(|| render(<sqlx::Postgres as Dialect>::NOW));
    DB::pick(&SQLITE, &POSTGRES)
}

/// Refuses an image the store cannot take; nothing is written.
fn check(media: &NewMedia) -> Result<(), StoreError> {
    if media.media_type.is_empty() || media.media_type.len() > 255 {
        return Err(StoreError::Invalid { what: "an image's media type must be 1 to 255 bytes".into() });
    }
    if media.data.is_empty() || media.data.len() > MAX_MEDIA_BYTES {
        return Err(StoreError::Invalid {
            what: format!("an image must be 1 to {MAX_MEDIA_BYTES} bytes, not {} bytes", media.data.len()),
        });
    }
    Ok(())
}

/// Inserts `media` for `session_id` inside a transaction that holds the session's lock, and
/// returns their digests.
#[sqlx_bounds(DB)]
pub(crate) async fn insert<DB>(
    tx: &mut Transaction<'_, DB>,
    session_id: &str,
    media: &[NewMedia],
) -> Result<Vec<String>, StoreError>
where
    DB: Dialect,
{
    let mut digests = Vec::with_capacity(media.len());
    for image in media {
        let digest = image.digest();
        sqlx::query(statements::<DB>().insert)
            .bind(session_id)
            .bind(digest.as_str())
            .bind(ROW_VERSION)
            .bind(image.media_type.as_str())
            .bind(i64::try_from(image.data.len()).unwrap_or(i64::MAX))
            .bind(image.data.as_slice())
            .execute(&mut **tx)
            .await?;
        digests.push(digest);
    }
    Ok(digests)
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> MediaStore for B
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    async fn put_media(&self, session_id: &str, media: &[NewMedia]) -> Result<Vec<String>, StoreError> {
        media.iter().try_for_each(check)?;
        let mut tx = self.begin_write().await?;
        Sql::<DB>::lock_session(&mut tx, session_id).await?;
        let digests = insert(&mut tx, session_id, media).await?;
        tx.commit().await?;
        Ok(digests)
    }

    async fn media(&self, session_id: &str, digest: &str) -> Result<Option<Media>, StoreError> {
        let row = sqlx::query(statements::<DB>().select)
            .bind(session_id)
            .bind(digest)
            .fetch_optional(self.read_pool())
            .await?;
        let Some(row) = row else { return Ok(None) };
        check_row_version("media", &format!("{session_id}/{digest}"), row.try_get("row_version")?)?;
        Ok(Some(Media {
            session_id: row.try_get("session_id")?,
            digest: row.try_get("digest")?,
            media_type: row.try_get("media_type")?,
            data: row.try_get("data")?,
            created_at: row.try_get("created_at")?,
        }))
    }

    async fn send_user_message_with_media(
        &self,
        message: UserMessage,
        media: &[NewMedia],
    ) -> Result<MessageReceipt, StoreError> {
        media.iter().try_for_each(check)?;
        crate::backend::send(self, message, None, media).await
    }
}
