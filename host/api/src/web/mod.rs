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
    use super::*;

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
}
