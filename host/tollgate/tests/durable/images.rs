//! Images, with a real PNG through the real CLI and the mock model: a user message's image
//! reaches the model as an image block (the mock describes the bytes it received), is stored once
//! by digest (no transcript item or chunk holds its bytes) and reaches the model again when the
//! next turn resumes the session; a custom tool's image result is recorded by reference and
//! replayed to the model on resume; too many bytes are a 413 and a bad image a 400, storing
//! nothing; `tollgate session send --image` and `session show` carry and name them.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::served::{Served, stdout_of};
use crate::world::{Refund, World, api, root};

/// The PNG the chart guest returns (16×12 pixels, a red bar on white), as a client sends it.
fn png() -> Vec<u8> {
    std::fs::read(root().join("host/test-guests/chart/red-bar.png")).expect("the test PNG")
}

/// `sha256:…` of `bytes`, as the store keys them.
fn digest(bytes: &[u8]) -> String {
    tollgate_store::media::digest_of(bytes)
}

/// How the mock model describes an image it received (its `see` and its quoted results).
fn described(bytes: &[u8]) -> String {
    format!("image/png {} bytes {}", bytes.len(), digest(bytes))
}

/// The image blocks (`source.data`) of every `role` message of the mock's last model call, tool
/// results' images included.
fn images_sent(world: &World, role: &str) -> Vec<String> {
    let requests = world.mock.message_requests();
    let body = requests.last().and_then(|r| r.body.clone()).unwrap_or(Value::Null);
    let mut found = Vec::new();
    fn walk(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if map.get("type") == Some(&json!("image"))
                    && let Some(data) = map.get("source").and_then(|s| s["data"].as_str())
                {
                    found.push(data.to_owned());
                }
                map.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    for message in body["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == role) {
        walk(&message["content"], &mut found);
    }
    found
}

/// Asserts that no stored transcript item and no transcript chunk of `session` holds `text` (the
/// image's base64): the bytes are in the media table only.
async fn assert_bytes_stored_once(world: &World, session: &str, bytes: &[u8]) {
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    let store = world.store.as_ref();
    let items = tollgate_sessions::reads::read_all_items(store, session).await.expect("items");
    let holding: Vec<i64> = items.iter().filter(|i| i.body.get().contains(&text)).map(|i| i.seq).collect();
    assert!(holding.is_empty(), "items {holding:?} hold the image's bytes");
    let transcript = store.read_transcript(session).await.expect("transcript");
    assert!(transcript.chunks.iter().all(|c| !c.contains(&text)), "a transcript chunk holds the bytes");
    let references = items.iter().filter(|i| i.body.get().contains(&digest(bytes))).count();
    assert!(references >= 1, "no item references the image");
    let row = store.media().media(session, &digest(bytes)).await.expect("read media").expect("stored");
    assert_eq!(row.data, bytes, "the media table holds the bytes, byte for byte");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_s_png_reaches_the_model_is_stored_once_by_digest_and_reaches_it_again_on_the_next_turn() {
    let Some(world) = World::new("images: a message's PNG", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;
    let url = &served.url;
    let http = reqwest::Client::new();
    let bytes = png();
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
        "data": base64::engine::general_purpose::STANDARD.encode(&bytes)}});
    let created = api(http.post(format!("{url}/v1/sessions")).json(&json!({
        "session_id": "img", "message": "see", "images": [image],
    })))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let done = world.wait_idle_after("img", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // The model got the very bytes, as an image block of the prompt.
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert_eq!(answer, format!("saw: {}", described(&bytes)), "{}", world.diagnostics());
    let reference = json!([{"digest": digest(&bytes), "media_type": "image/png"}]);
    assert_eq!(serde_json::to_value(&done.messages[0].images).unwrap(), reference, "{:?}", done.messages);
    assert_bytes_stored_once(&world, "img", &bytes).await;
    let snapshot = api(http.get(format!("{url}/v1/sessions/img"))).await;
    assert_eq!(snapshot.body["messages"][0]["images"], reference, "{}", snapshot.text);

    // Served by digest, as its bytes.
    let media_url = format!("{url}/v1/sessions/img/media/{}", digest(&bytes));
    let served_image = api(http.get(&media_url)).await;
    assert_eq!((served_image.status, served_image.content_type.as_deref()), (200, Some("image/png")));
    let got = http.get(&media_url).send().await.expect("GET media").bytes().await.expect("bytes");
    assert_eq!(got.as_ref(), bytes.as_slice());
    let other = api(http.get(format!("{url}/v1/sessions/img/media/{}", digest(b"other")))).await;
    assert_eq!((other.status, other.body["error"]["code"].as_str()), (404, Some("media_not_found")));

    // Too many bytes, and a bad image: refused, nothing stored.
    // 2.5 MiB: within the body's limit in base64, over the images' limit of 2 MiB.
    let mut big = bytes.clone();
    big.resize(5 * 512 * 1024, 0);
    let big = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
        "data": base64::engine::general_purpose::STANDARD.encode(&big)}});
    let refused = api(http
        .post(format!("{url}/v1/sessions/img/messages"))
        .json(&json!({"text": "see", "images": [big]})))
    .await;
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str(), refused.body["error"]["field"].as_str()),
        (413, Some("image_too_large"), Some("images")),
        "{}",
        refused.text
    );
    let bmp =
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "Qk0="}});
    let refused = api(http
        .post(format!("{url}/v1/sessions/img/messages"))
        .json(&json!({"text": "see", "images": [bmp]})))
    .await;
    assert_eq!(
        (refused.status, refused.body["error"]["field"].as_str()),
        (400, Some("images[0].source.media_type")),
        "{}",
        refused.text
    );
    assert_eq!(world.snapshot("img").await.messages.len(), done.messages.len(), "no message was stored");

    // The next turn resumes the session: its stored transcript gets the bytes back, and the model
    // is sent the first prompt's image again.
    let output = served.tollgate(&["session", "send", "img", "recall"]).await;
    stdout_of(&output, "tollgate session send");
    let again = world.wait_idle_after("img", 2).await;
    assert_eq!(again.last_turn_error, None, "{}", world.diagnostics());
    let sent = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(images_sent(&world, "user"), [sent], "the resumed CLI sent the image again");
    assert_bytes_stored_once(&world, "img", &bytes).await;

    // The CLI client sends an image file and names the images it shows.
    let file = world.dir.path().join("chart.png");
    std::fs::write(&file, &bytes).expect("write the PNG");
    let file = file.display().to_string();
    let output = served.tollgate(&["session", "send", "img", "see", "--image", &file]).await;
    stdout_of(&output, "tollgate session send --image");
    let third = world.wait_idle_after("img", 3).await;
    assert_eq!(third.messages.last().map(|m| m.text.clone()), Some(format!("saw: {}", described(&bytes))));
    let shown = stdout_of(&served.tollgate(&["session", "show", "img"]).await, "tollgate session show");
    assert!(shown.contains(&format!("[image image/png {}]", digest(&bytes))), "{shown}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_result_s_image_is_recorded_by_reference_and_replayed_to_the_model_on_resume() {
    let Some(world) = World::new("images: a tool result's PNG", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    std::fs::copy(tollgate_test_guests::CHART, world.agent.join("tools/chart.wasm")).expect("chart guest");
    let config = world.agent.join("tollgate.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replace(
        "[policies]\n",
        "[policies]\nrender_chart = { effect = \"idempotent_write\", requires_approval = true }\n",
    );
    std::fs::write(&config, text).expect("write config");
    let _worker = world.worker("w");
    world.send("chart", r#"call render_chart {"title":"refunds of order 7"}"#).await;
    let waiting = world.wait_for("chart", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    world.decide("chart", &id, true, None, "k1").await;
    let done = world.wait_idle_after("chart", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // The deferred call ran once in its step; the resumed CLI got its recorded text and image.
    let bytes = png();
    // (The CLI adds an `[Image: source: <its copy of the file>]` text after a result's image.)
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    let expected = format!("called render_chart: chart: refunds of order 7\n[image {}]", described(&bytes));
    assert!(answer.starts_with(&expected), "{answer}\n{}", world.diagnostics());
    let call = &done.tool_calls[0];
    assert_eq!(call.state.name(), "succeeded", "{call:?}");
    assert_eq!(call.state.text(), Some("chart: refunds of order 7"), "the record keeps its text as it was");
    let reference = json!([{"digest": digest(&bytes), "media_type": "image/png"}]);
    assert_eq!(serde_json::to_value(&call.images).unwrap(), reference, "{call:?}");
    assert_bytes_stored_once(&world, "chart", &bytes).await;

    // The next turn: the tool result's image is put back into the resumed transcript.
    world.send("chart", "recall").await;
    let again = world.wait_idle_after("chart", 2).await;
    assert_eq!(again.last_turn_error, None, "{}", world.diagnostics());
    let sent = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(images_sent(&world, "user"), [sent], "the tool result's image, once");
}
