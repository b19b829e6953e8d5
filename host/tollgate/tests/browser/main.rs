//! The web inbox in a real browser: Debian's Chromium under chromedriver, driven from Rust
//! (`fantoccini`), against `tollgate serve` (API + Worker running the real CLI against the mock
//! model) or `tollgate api` on a store the test seeds. The durable tests' world (`util`),
//! server (`served`), seeding (`park`) and chaos harness (which `util` uses) are shared by path,
//! not copied.
//!
//! - `a11y`: focus ring and control borders at least 3:1, a visible caption on the arguments,
//!   `role="alert"` on a wrapper, no ring on `<main>`, axe-core clean on the inbox, a session
//!   page and the sessions list.
//! - `agents`: the Agents page (versions, canary, loaded bundles) and the sessions list of one agent.
//! - `cancel`: a streaming turn cancelled with the session page's button by the client who
//!   started the session; the button disabled, with why, for another client.
//! - `live_text`: a reply shown on the session page as it streams, from the snapshot then live.
//! - `activity`: the model's thinking and its inline tool calls (built-in, allowed `Bash`,
//!   custom) on the session page, live and from the event log.
//! - `deciding`: a decision held on its card with an Undo before it is sent (nothing reaches
//!   the server when undone), focus moving to the next card, a confirmation above the refund
//!   policy's threshold, Reject as a form, "Approve for this session" in a secondary menu.
//! - `failures`: a refund whose outcome is unknown as a banner on its session page; an empty
//!   audit trail that says so; a tool component a Worker could not load, named in the inbox and on the
//!   Agents page of a `tollgate api` without a Worker.
//! - `images`: a message's image on the session page, fetched with the token.
//! - `inbox`: a refund approved through the page with an edited amount (paid as edited), a
//!   rejection whose reason the model reads, an approver outside the tool's group shown disabled
//!   buttons (and refused 403 when forging the request), interrupts appearing on an open page,
//!   a session page with its records and a message sent from it, `<img onerror>` in a tool result,
//!   an argument and a session id shown as text, no console errors, 1,000 pending approvals.
//!
//! - `volume`: the inbox's list view, filters (agent, search), `?` keys and bulk reject of
//!   selected rows (each its own audited decision); the figure "keystrokes and seconds to decide
//!   20 pending refunds by keyboard", Tab-only against the `j`/`a` shortcuts.
//!
//! Without Chromium the tests fail, naming what to install, unless `TOLLGATE_SKIP_MISSING` names
//! `browser`, when they skip with a message (`tollgate_store_testing::skip`).

mod a11y;
mod activity;
mod agents;
mod cancel;
mod deciding;
mod driver;
mod failures;
mod images;
mod inbox;
mod live_text;
mod mcp;
mod review;
mod volume;

use tollgate_testing::{park, served, world};
