//! The conformance cases of [`tollgate_store::media::MediaStore`]: images stored once per session by the
//! digest of their bytes, read back byte for byte, and a user message's images stored with it.

use super::{Harness, claimed_session, done, entry, message, new_session, part};
use tollgate_store::media::{NewMedia, digest_of};
use tollgate_store::*;

/// Bytes that are not valid UTF-8 (a PNG's signature), so a text column would mangle them.
fn png_bytes(tail: u8) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff];
    bytes.push(tail);
    bytes
}

fn png(tail: u8) -> NewMedia {
    NewMedia { media_type: "image/png".into(), data: png_bytes(tail) }
}

pub(super) async fn an_image_is_stored_once_per_session_by_the_digest_of_its_bytes(h: Harness) {
    let s = &*h.store;
    new_session(s, "a").await;
    new_session(s, "b").await;
    let digests = s.media().put_media("a", &[png(1), png(2), png(1)]).await.unwrap();
    assert_eq!(digests, [digest_of(&png_bytes(1)), digest_of(&png_bytes(2)), digest_of(&png_bytes(1))]);
    assert!(digests[0].starts_with("sha256:") && digests[0].len() == 71, "{digests:?}");
    // Again: the same rows.
    assert_eq!(s.media().put_media("a", &[png(1)]).await.unwrap()[0], digests[0]);
    assert_eq!(h.count("SELECT count(*) FROM media WHERE session_id = 'a'").await, 2);
    let stored = s.media().media("a", &digests[0]).await.unwrap().expect("stored");
    assert_eq!(
        (stored.media_type.as_str(), stored.data.clone()),
        ("image/png", png_bytes(1)),
        "byte for byte"
    );
    assert_eq!(stored.digest, digests[0]);
    assert_eq!(s.media().media("b", &digests[0]).await.unwrap(), None, "another session's image is not read");
    // Refused, nothing stored.
    let unknown = s.media().put_media("nobody", &[png(3)]).await.unwrap_err();
    assert!(matches!(unknown, StoreError::SessionNotFound { .. }), "{unknown}");
    let empty = NewMedia { media_type: "image/png".into(), data: Vec::new() };
    let huge = NewMedia {
        media_type: "image/png".into(),
        data: vec![0; tollgate_store::media::MAX_MEDIA_BYTES + 1],
    };
    for bad in [empty, huge, NewMedia { media_type: String::new(), data: png_bytes(4) }] {
        let refused = s.media().put_media("a", &[png(5), bad]).await.unwrap_err();
        assert!(matches!(refused, StoreError::Invalid { .. }), "{refused}");
    }
    assert_eq!(h.count("SELECT count(*) FROM media").await, 2, "a refused call stores none of its images");
}

pub(super) async fn a_message_and_its_images_are_stored_together_or_not_at_all(h: Harness) {
    let s = &*h.store;
    new_session(s, "m").await;
    let sent = s.media().send_user_message_with_media(message("m", "k1", "look"), &[png(1)]).await.unwrap();
    assert!(!sent.replayed);
    assert!(s.media().media("m", &digest_of(&png_bytes(1))).await.unwrap().is_some());
    let replay = s.media().send_user_message_with_media(message("m", "k1", "look"), &[png(1)]).await.unwrap();
    assert!(replay.replayed);
    // A conflicting key stores neither the message nor its images.
    let conflict =
        s.media().send_user_message_with_media(message("m", "k1", "other"), &[png(2)]).await.unwrap_err();
    assert!(matches!(conflict, StoreError::IdempotencyConflict { .. }), "{conflict}");
    assert_eq!(s.media().media("m", &digest_of(&png_bytes(2))).await.unwrap(), None);
    let missing =
        s.media().send_user_message_with_media(message("nobody", "k", "hi"), &[png(3)]).await.unwrap_err();
    assert!(matches!(missing, StoreError::SessionNotFound { .. }), "{missing}");
    assert_eq!(h.count("SELECT count(*) FROM media").await, 1);
}

pub(super) async fn a_messages_images_are_kept_with_its_projection_and_not_merged(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "p").await;
    let images = r#"[{"digest":"sha256:aa","media_type":"image/png"}]"#;
    let mut done = done();
    done.items = vec![entry("u1", "{}"), entry("a1", "{}"), entry("a2", "{}")];
    done.messages = vec![
        NewMessage { images: Some(images.into()), ..part(0, "user", None, "what is this?") },
        part(1, "assistant", Some("msg_1"), "A chart."),
        NewMessage { images: Some(images.into()), ..part(2, "assistant", Some("msg_1"), "Of sales.") },
    ];
    s.commit(&c, done).await.unwrap();
    let page = s.read_messages("p", None, 10).await.unwrap();
    let got: Vec<(&str, Option<&str>)> =
        page.messages.iter().map(|m| (m.text.as_str(), m.images.as_deref())).collect();
    assert_eq!(got, [("what is this?", Some(images)), ("A chart.\n\nOf sales.", None)]);
}
