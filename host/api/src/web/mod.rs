//! The web inbox: the page operators keep open to decide approvals, read sessions and send
//! messages, served at `/` by `tollgate serve` and `tollgate api`.
//!
//! Plain HTML, CSS and JavaScript modules under `assets/`, embedded in the binary
//! (`include_str!`): no build step, nothing fetched from elsewhere. The page talks to the same
//! HTTP API as the CLI client, with the same bearer token (kept in the tab's `sessionStorage`,
//! never in a URL), so every rule (roles, approver groups, separation of duties) is the API's;
//! the page only disables what the API says would be refused (`GET /v1/me`, the live inbox's
//! `decide`). The inbox is live over `GET /v1/interrupts/events`, a session page over its
//! `…/events`, both read with `fetch` (an `EventSource` cannot send the token) and resumed with
//! `Last-Event-ID`.
//!
//! Every response carries a strict Content-Security-Policy (scripts and styles from this origin
//! only, no inline script, no framing; images from this origin or from `blob:` URLs, which is how
//! the page shows a session's images: fetched with the token, then shown from memory), `X-Content-Type-Options: nosniff` and
//! `Referrer-Policy: no-referrer`. The scripts insert data only as text (`textContent`), never
//! as HTML.
//!
//! These routes need no token: they are the same public files for everyone; the data comes
//! from the API, which checks the token.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The Content-Security-Policy of every page and asset.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
                       connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Each asset: its path, media type and contents.
const ASSETS: &[(&str, &str, &str)] = &[
    ("/", "text/html; charset=utf-8", include_str!("assets/index.html")),
    ("/app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
    ("/favicon.svg", "image/svg+xml", include_str!("assets/favicon.svg")),
    ("/js/app.js", "text/javascript; charset=utf-8", include_str!("assets/js/app.js")),
    ("/js/attention.js", "text/javascript; charset=utf-8", include_str!("assets/js/attention.js")),
    ("/js/agents.js", "text/javascript; charset=utf-8", include_str!("assets/js/agents.js")),
    ("/js/api.js", "text/javascript; charset=utf-8", include_str!("assets/js/api.js")),
    ("/js/dom.js", "text/javascript; charset=utf-8", include_str!("assets/js/dom.js")),
    ("/js/inbox.js", "text/javascript; charset=utf-8", include_str!("assets/js/inbox.js")),
    ("/js/schema.js", "text/javascript; charset=utf-8", include_str!("assets/js/schema.js")),
    ("/js/session.js", "text/javascript; charset=utf-8", include_str!("assets/js/session.js")),
    ("/js/sessions.js", "text/javascript; charset=utf-8", include_str!("assets/js/sessions.js")),
];

/// The page's routes (no auth: see the module docs).
pub fn router() -> Router {
    let mut router = Router::new();
    for &(path, media, body) in ASSETS {
        router = router.route(path, get(move || async move { asset(media, body) }));
    }
    router
}

fn asset(media: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use tollgate_engine::events::EventKind;

    use super::*;
    use crate::webhooks;

    #[test]
    fn no_asset_carries_inline_script_or_html_insertion_of_data() {
        for &(path, _, body) in ASSETS {
            if path == "/" {
                // Every <script> of the page loads a file; none has a body.
                for chunk in body.split("<script").skip(1) {
                    assert!(chunk.contains("src=\"/js/"), "{path}: an inline script: <script{chunk}");
                    let open_end = chunk.find('>').expect("a closed tag");
                    assert!(chunk[open_end + 1..].starts_with("</script>"), "{path}: a script with a body");
                }
                for (at, _) in body.match_indices(" on") {
                    let name: String = body[at + 3..].chars().take_while(char::is_ascii_alphabetic).collect();
                    let after = body[at + 3 + name.len()..].chars().next();
                    assert!(name.is_empty() || after != Some('='), "{path}: an inline handler on{name}=");
                }
            }
            if path.ends_with(".js") {
                for banned in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
                    assert!(!body.contains(banned), "{path} uses {banned}");
                }
            }
        }
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        let served: Vec<&str> = ASSETS.iter().map(|(path, ..)| *path).collect();
        for &(path, _, body) in ASSETS.iter().filter(|(path, ..)| path.ends_with(".js")) {
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let module = line
                    .rsplit("from")
                    .next()
                    .unwrap()
                    .trim()
                    .trim_matches(|c| c == '\'' || c == ';' || c == '"');
                let absolute = format!("/js/{}", module.trim_start_matches("./"));
                assert!(served.contains(&absolute.as_str()), "{path} imports {module}, which is not served");
            }
        }
    }

    /// Whether the session page reloads its snapshot on an event of `kind` (`REFRESH_ON` in
    /// `session.js`). Every kind is named, so a kind the engine adds must be sorted in here and
    /// there.
    fn refreshes_the_session_page(kind: EventKind) -> bool {
        match kind {
            EventKind::UserMessage
            | EventKind::TurnStarted
            | EventKind::TurnCompleted
            | EventKind::TurnFailed
            | EventKind::ToolCallStarted
            | EventKind::ToolCallFinished
            | EventKind::InterruptOpened
            | EventKind::InterruptResolved
            | EventKind::DecisionRecorded
            | EventKind::AttemptFailed
            | EventKind::AgentUpgraded
            | EventKind::CancelRequested
            | EventKind::TurnCancelled => true,
            // Text and thinking are drawn as they come; the others change nothing the page shows
            // before one of the kinds above arrives.
            EventKind::TextDelta
            | EventKind::ReasoningDelta
            | EventKind::ApprovedUnderGrant
            | EventKind::GrantRevoked
            | EventKind::ApprovalAwaited
            | EventKind::DecidedAheadUsed
            | EventKind::AheadUnused
            | EventKind::InterruptEscalated => false,
        }
    }

    /// The names in `const <name> = new Set([...]);` of `js`.
    fn js_set<'a>(js: &'a str, name: &str) -> Vec<&'a str> {
        let start = js.find(&format!("const {name} = new Set([")).unwrap_or_else(|| panic!("no {name}"));
        let list = &js[start..];
        let list = &list[list.find('[').unwrap() + 1..list.find("])").unwrap()];
        list.split(',').map(|n| n.trim().trim_matches('\'')).filter(|n| !n.is_empty()).collect()
    }

    /// Every event kind the engine lists reaches every consumer, and no consumer names a kind the
    /// engine does not list: the HTTP API's document, the webhooks, the CLI's follower and the
    /// session page.
    #[test]
    fn every_event_kind_reaches_every_consumer() {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        // The API's document lists every kind as an example of `StreamEvent.kind`.
        let doc: serde_json::Value = serde_json::from_str(crate::api::openapi::document()).unwrap();
        let listed = &doc["components"]["schemas"]["StreamEvent"]["properties"]["kind"]["examples"];
        assert_eq!(listed, &serde_json::json!(names), "the document's event kinds");
        // Each webhook type is made from one kind, and that kind makes it.
        for t in webhooks::EventType::ALL {
            assert_eq!(webhooks::EventType::from_event_kind(t.event_kind()), Some(t), "{}", t.as_str());
        }
        for &kind in EventKind::ALL {
            if let Some(t) = webhooks::EventType::from_event_kind(kind) {
                assert_eq!(t.event_kind(), kind);
            }
        }
        // The session page: what reloads it, what ends a turn, and every kind it compares with.
        let js = ASSETS.iter().find(|(path, ..)| *path == "/js/session.js").unwrap().2;
        let mut refresh = js_set(js, "REFRESH_ON");
        refresh.sort_unstable();
        let mut want: Vec<&str> =
            EventKind::ALL.iter().filter(|k| refreshes_the_session_page(**k)).map(|k| k.as_str()).collect();
        want.sort_unstable();
        assert_eq!(refresh, want, "session.js REFRESH_ON");
        let mut ends = js_set(js, "TURN_ENDS");
        ends.sort_unstable();
        let mut want: Vec<&str> =
            EventKind::ALL.iter().filter(|k| k.ends_turn()).map(|k| k.as_str()).collect();
        want.sort_unstable();
        assert_eq!(ends, want, "session.js TURN_ENDS");
        for compared in ["data.kind === '", "event.event === '"] {
            for (at, _) in js.match_indices(compared) {
                let rest = &js[at + compared.len()..];
                let name = &rest[..rest.find('\'').unwrap()];
                assert!(EventKind::parse(name).is_some(), "session.js compares with `{name}`, no event kind");
            }
        }
    }
}
