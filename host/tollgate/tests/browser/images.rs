//! The session page shows a message's image: fetched with the token from
//! `GET …/media/{digest}` and drawn from memory (a `blob:` URL the page's CSP allows), with an
//! alt text naming it.

use base64::Engine as _;
use serde_json::json;

use crate::driver::Browser;
use crate::served::Served;
use crate::world::{Refund, World, api, root};

#[tokio::test(flavor = "multi_thread")]
async fn the_session_page_shows_the_image_a_message_carried() {
    let _one = crate::inbox::ONE_BROWSER.lock().await;
    let test = "browser: a message's image on the session page";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let Some(browser) = Browser::start(test, world.dir.path()).await else { return };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let url = served.url.clone();
    let png = std::fs::read(root().join("host/test-guests/chart/red-bar.png")).expect("the test PNG");
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
        "data": base64::engine::general_purpose::STANDARD.encode(&png)}});
    let created = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth("t0ken")
        .json(&json!({"session_id": "pic", "message": "see", "images": [image]})))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let done = world.wait_idle_after("pic", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    browser.sign_in(&url, "t0ken", "tollgate:token").await;
    browser.client.goto(&format!("{url}/#/session/pic")).await.unwrap();
    let shown = browser
        .until(
            "the message's image, drawn",
            "const img = document.querySelector('#messages li.user img'); return img && img.complete && img.naturalWidth > 0 && [img.naturalWidth, img.naturalHeight, img.alt, img.src.slice(0, 5)];",
            vec![],
        )
        .await;
    let (width, height, alt, scheme): (u32, u32, String, String) =
        serde_json::from_value(shown).expect("four values");
    assert_eq!((width, height, scheme.as_str()), (16, 12, "blob:"), "the PNG's own size, from memory");
    assert!(alt.contains("image 1 of 1") && alt.contains("image/png"), "{alt}");
    browser.assert_no_console_errors("while the image showed").await;
    browser.stop().await;
    served.stop().await;
}
