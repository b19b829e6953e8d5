//! The per-call store state: WASI and `wasi:http` contexts built from a manifest, the memory
//! limiter, the host side of `tollgate:tool/log` and `tollgate:tool/config`, and the policy hooks
//! that enforce the grants. Read [`HostState::new`] first.
//!
//! Deny by default: no arguments, no environment, empty stdin, stdout discarded, stderr kept (the
//! first 16 KiB, for a panic message), no preopens, no name lookup, no UDP, TCP only to granted
//! addresses, and every `wasi:http` request checked against the allow-list.
//!
//! The host's own memory is bounded per call too, by a [`HostBudget`] derived from the
//! component's `memory_mb`: the resource table holds at most `handles` live resources (header
//! sets, requests, bodies, streams, pollables), each header set at most `field_bytes`, each
//! request body buffers at most two `body_chunk`s; a denied request's body is drained and
//! discarded, never collected. Log messages are escaped so a guest cannot forge host log lines.
//!
//! The hooks also log whether anything of the call may have left the machine
//! ([`crate::reach`]): a request sent, a TCP connect, a writable directory.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use http_body_util::BodyExt;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::allow::AllowedHosts;
use crate::bindings::tool::tollgate::tool::{config, log, types};
use crate::manifest::Manifest;
use crate::reach::{self, ReachLog};

/// Bytes of a guest's stderr kept per call.
const STDERR_KEPT: usize = 16 << 10;
/// Bytes of one log message kept; the rest is cut.
const LOG_MESSAGE_MAX: usize = 4 << 10;
/// Log messages kept per call; later ones are counted and dropped.
const LOG_MESSAGES_MAX: u32 = 256;

/// What the host itself may hold for one call on behalf of its guest, derived from the
/// component's memory cap. Worst case, header sets take about `memory_mb` and buffered request
/// bodies half of it again (never less than the floors below). Pure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostBudget {
    /// Live entries of the resource table (every `wasi:*` resource the guest holds).
    pub(crate) handles: usize,
    /// Bytes of one `wasi:http` header set (names and values, in wasmtime's accounting).
    pub(crate) field_bytes: usize,
    /// Bytes of one write to an outgoing body; two such chunks are buffered per body.
    pub(crate) body_chunk: usize,
}

impl HostBudget {
    /// Fewest live handles a call gets, whatever its memory: enough for any real guest
    /// (JavaScript and Python runtimes hold dozens).
    pub(crate) const MIN_HANDLES: usize = 256;
    /// Most live handles a call gets.
    pub(crate) const MAX_HANDLES: usize = 16 << 10;
    /// The largest header set (a proxy accepts 8 to 16 KiB on the wire).
    pub(crate) const MAX_FIELD_BYTES: usize = 64 << 10;
    /// The smallest header-set cap.
    pub(crate) const MIN_FIELD_BYTES: usize = 4 << 10;
    /// Bytes per write to an outgoing body.
    pub(crate) const BODY_CHUNK: usize = 16 << 10;

    /// The budget of a component whose memories may hold `memory_bytes` in all.
    pub(crate) fn for_memory(memory_bytes: usize) -> Self {
        let handles = (memory_bytes / Self::MAX_FIELD_BYTES).clamp(Self::MIN_HANDLES, Self::MAX_HANDLES);
        let field_bytes = (memory_bytes / handles).clamp(Self::MIN_FIELD_BYTES, Self::MAX_FIELD_BYTES);
        Self { handles, field_bytes, body_chunk: Self::BODY_CHUNK }
    }
}

/// The state of one store (one call, or one load-time `list-tools`).
pub(crate) struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: HttpPolicy,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    config: Arc<BTreeMap<String, Option<String>>>,
    component: Arc<str>,
    logs_emitted: u32,
    pub(crate) stderr: TruncatingPipe,
    pub(crate) deadline: Instant,
    /// What of the call may have left the machine.
    pub(crate) reach: ReachLog,
    /// Outbound requests and connections the allow-list refused during the call.
    pub(crate) denied: DeniedLog,
}

impl HostState {
    pub(crate) fn new(
        component: Arc<str>,
        manifest: &Manifest,
        config: Arc<BTreeMap<String, Option<String>>>,
        deadline: Instant,
    ) -> Result<Self, wasmtime::Error> {
        let stderr = TruncatingPipe::new(STDERR_KEPT);
        let reach = ReachLog::default();
        // One copy of the allow-list per store, shared by the checks and the denial log (which
        // writes it out only when something is refused, off the path of a call that is not).
        let allowed = Arc::new(manifest.allowed_hosts.clone());
        let denied = DeniedLog::new(component.clone(), allowed.clone());
        let mut b = WasiCtx::builder();
        b.stderr(stderr.clone());
        b.allow_ip_name_lookup(false);
        b.allow_udp(false);
        for dir in &manifest.dirs {
            let perms = if dir.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            b.preopened_dir(&dir.host, &dir.guest, perms)?;
            if dir.writable {
                // Its writes are not watched: whatever the call did may have stayed written.
                reach.mark_left();
            }
        }
        if manifest.allowed_hosts.any_tcp() {
            let allowed = allowed.clone();
            let connects = reach.clone();
            let refused = denied.clone();
            b.allow_tcp(true);
            b.socket_addr_check(move |addr, usage| {
                use wasmtime_wasi::sockets::SocketAddrUse;
                let ok = match usage {
                    SocketAddrUse::TcpConnect => {
                        let ok = allowed.allows_tcp(addr);
                        if ok {
                            // Whether the connect succeeds is not seen here: count the attempt.
                            connects.mark_left();
                        } else {
                            refused.note(format!("tcp://{addr}"));
                        }
                        ok
                    }
                    // A connect without a bind is checked as an implicit bind to the unspecified
                    // address, port 0 (as wasmtime's WASI sockets check it): allow exactly that.
                    SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                    _ => false,
                };
                Box::pin(async move { ok })
            });
        } else {
            b.allow_tcp(false);
        }
        let budget = HostBudget::for_memory(manifest.limits.memory_bytes);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(budget.field_bytes);
        let mut table = ResourceTable::new();
        table.set_max_capacity(budget.handles);
        Ok(Self {
            wasi: b.build(),
            http,
            hooks: HttpPolicy {
                allowed,
                body_chunk: budget.body_chunk,
                reach: reach.clone(),
                denied: denied.clone(),
            },
            table,
            limiter: MemoryLimiter::new(manifest.limits.memory_bytes),
            config,
            component,
            logs_emitted: 0,
            stderr,
            deadline,
            reach,
            denied,
        })
    }
}

impl HostState {
    /// The name of the component this store runs.
    pub(crate) fn component(&self) -> &str {
        &self.component
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl types::Host for HostState {}

impl crate::bindings::agent::v0_1::plain::tollgate::agent::types::Host for HostState {}

impl crate::bindings::agent::v0_2::tollgate::agent::types::Host for HostState {}

impl log::Host for HostState {
    fn emit(&mut self, level: log::Level, message: String) {
        self.logs_emitted += 1;
        if self.logs_emitted > LOG_MESSAGES_MAX {
            if self.logs_emitted == LOG_MESSAGES_MAX + 1 {
                tracing::warn!(
                    component = &*self.component,
                    "log limit of {LOG_MESSAGES_MAX} messages per call reached; dropping the rest"
                );
            }
            return;
        }
        let message = escape_controls(truncate(&message, LOG_MESSAGE_MAX));
        let component = &*self.component;
        match level {
            log::Level::Trace => tracing::trace!(target: "tollgate::guest", component, "{message}"),
            log::Level::Debug => tracing::debug!(target: "tollgate::guest", component, "{message}"),
            log::Level::Info => tracing::info!(target: "tollgate::guest", component, "{message}"),
            log::Level::Warn => tracing::warn!(target: "tollgate::guest", component, "{message}"),
            log::Level::Error => tracing::error!(target: "tollgate::guest", component, "{message}"),
        }
    }
}

impl config::Host for HostState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned().flatten()
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` with every control character made visible (`\n`, `\r`, `\t`, `\u{1b}`, …) and
/// backslashes doubled, so what a guest writes stays on one line and cannot draw host log lines,
/// move the cursor or recolour a terminal. Borrows when there is nothing to escape.
pub(crate) fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    // Line and paragraph separators break lines in some viewers; bidi controls reorder them.
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(|c| hidden(c) || c == '\\') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A guest's stderr for a log or record: its lines kept, each escaped ([`escape_controls`]) and
/// every line after the first indented with `  | `, so no line of it can pass for a log line of
/// the host's. `None` when it wrote nothing but blanks.
pub(crate) fn stderr_lines(text: &str) -> Option<String> {
    let text = text.trim_end();
    if text.trim().is_empty() {
        return None;
    }
    let lines: Vec<std::borrow::Cow<'_, str>> = text.lines().map(escape_controls).collect();
    Some(lines.join("\n  | "))
}

/// Caps the memory of all of a component's memories together (wasmtime's `StoreLimits` caps each
/// memory on its own) and remembers when the cap was hit, so the call can say so.
pub(crate) struct MemoryLimiter {
    cap: usize,
    in_use: usize,
    pub(crate) refused: Option<usize>,
}

impl MemoryLimiter {
    fn new(cap: usize) -> Self {
        Self { cap, in_use: 0, refused: None }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool, wasmtime::Error> {
        let total = self.in_use - current + desired;
        if total > self.cap {
            self.refused = Some(total);
            return Err(wasmtime::format_err!(
                "memory limit exceeded: growing to {total} bytes in all would pass the cap of {} bytes",
                self.cap
            ));
        }
        self.in_use = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool, wasmtime::Error> {
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

/// The `wasi:http` hook: a request leaves only when the allow-list admits its destination, and
/// the call's [`ReachLog`] learns whether it did.
struct HttpPolicy {
    allowed: Arc<AllowedHosts>,
    body_chunk: usize,
    reach: ReachLog,
    denied: DeniedLog,
}

/// The destinations a call's allow-list refused, so the call's error can name them (a guest sees
/// only WASI's bare `HTTP-request-denied` or a refused connect). Logged at `warn` as they happen:
/// a tool author sees them in `serve`'s default log.
#[derive(Clone)]
pub(crate) struct DeniedLog {
    inner: Arc<std::sync::Mutex<Vec<String>>>,
    component: Arc<str>,
    allowed: Arc<AllowedHosts>,
}

impl DeniedLog {
    /// The most destinations one call's error names.
    const KEPT: usize = 4;

    fn new(component: Arc<str>, allowed: Arc<AllowedHosts>) -> DeniedLog {
        DeniedLog { inner: Arc::default(), component, allowed }
    }

    /// Notes a refused destination (escaped; the query left out by the caller).
    fn note(&self, destination: String) {
        let destination = escape_controls(&destination).into_owned();
        tracing::warn!(
            component = &*self.component,
            %destination,
            allowed = %self.allowed,
            "outbound request denied: not on the component's allow-list"
        );
        let mut list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() < Self::KEPT && !list.contains(&destination) {
            list.push(destination);
        }
    }

    /// What a failed call's error adds, when anything was refused: the destinations and the
    /// allow-list.
    pub(crate) fn explanation(&self) -> Option<String> {
        let list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (!list.is_empty()).then(|| {
            format!(
                "the sandbox denied outbound access to {}: not on this tool's allow-list, which is {}",
                list.join(", "),
                self.allowed
            )
        })
    }
}

type IoFuture = Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>;

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: IoFuture,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (http::Response<wasmtime_wasi_http::WasiBody>, IoFuture),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        drop(fut);
        let uri = request.uri();
        let allowed = match (uri.scheme_str(), uri.host()) {
            (Some(scheme), Some(host)) => self.allowed.allows_http(scheme, host, uri.port_u16()),
            _ => false,
        };
        if !allowed {
            // Without the query: it may carry a credential the tool was granted.
            let destination = format!(
                "{}://{}{}",
                uri.scheme_str().unwrap_or("?"),
                uri.authority().map_or("?", |a| a.as_str()),
                uri.path()
            );
            self.denied.note(destination);
            // Drain the body the guest is writing before refusing (StarlingMonkey's fetch traps
            // when the body stream of a refused request is dropped under it), one frame at a
            // time and discarding each: memory stays at one chunk whatever the body's size. The
            // call's deadline bounds the wait.
            return Box::new(async move {
                let mut body = request.into_body();
                while let Some(Ok(frame)) = body.frame().await {
                    drop(frame);
                }
                Err(wasmtime_wasi_http::Error::HttpRequestDenied)
            });
        }
        let opening = self.reach.opening();
        Box::new(async move {
            match wasmtime_wasi_http::default_send_request(request, options).await {
                Ok((response, io)) => {
                    opening.settle(true);
                    Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as IoFuture))
                }
                Err(error) => {
                    opening.settle(!reach::never_sent(&error));
                    Err(error)
                }
            }
        })
    }

    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        self.body_chunk
    }
}

/// A guest output stream that keeps its first bytes and silently drops the rest, so a chatty
/// guest never traps on a full pipe.
#[derive(Clone)]
pub(crate) struct TruncatingPipe {
    inner: Arc<Mutex<(Vec<u8>, usize)>>,
    keep: usize,
}

impl TruncatingPipe {
    fn new(keep: usize) -> Self {
        Self { inner: Arc::new(Mutex::new((Vec::new(), 0))), keep }
    }

    /// What was kept, as text.
    pub(crate) fn text(&self) -> String {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&guard.0).into_owned()
    }
}

impl IsTerminal for TruncatingPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for TruncatingPipe {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for TruncatingPipe {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let room = self.keep.saturating_sub(guard.0.len());
        guard.0.extend_from_slice(&buf[..room.min(buf.len())]);
        guard.1 += buf.len();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_sums_every_memory_and_refuses_past_the_cap() {
        let mut l = MemoryLimiter::new(10 << 20);
        assert!(l.memory_growing(0, 4 << 20, None).unwrap());
        assert!(l.memory_growing(0, 4 << 20, None).unwrap());
        assert!(l.memory_growing(4 << 20, 6 << 20, None).unwrap(), "4 + 6 MiB is exactly the cap");
        assert!(l.memory_growing(6 << 20, 7 << 20, None).is_err(), "4 + 7 MiB passes a 10 MiB cap");
        assert_eq!(l.refused, Some(11 << 20));
    }

    #[test]
    fn the_host_budget_follows_the_memory_cap_within_its_floors() {
        let small = HostBudget::for_memory(16 << 20);
        assert_eq!(small, HostBudget { handles: 256, field_bytes: 64 << 10, body_chunk: 16 << 10 });
        assert_eq!(HostBudget::for_memory(128 << 20).handles, 2048);
        assert_eq!(HostBudget::for_memory(1 << 20).field_bytes, 4 << 10, "the floor");
        assert_eq!(HostBudget::for_memory(1 << 30).handles, 16 << 10, "the ceiling");
        for mb in [1usize, 16, 48, 128, 1024] {
            let b = HostBudget::for_memory(mb << 20);
            let headers = b.handles * b.field_bytes;
            assert!(headers <= (mb << 20).max(1 << 20), "{mb} MiB: headers may take {headers}");
        }
    }

    #[test]
    fn guest_log_text_cannot_break_lines_or_send_escapes() {
        assert_eq!(
            stderr_lines("Traceback (most recent call last):\n  File \"app.py\"\nKeyError: 'refund'\n\n")
                .as_deref(),
            Some("Traceback (most recent call last):\n  |   File \"app.py\"\n  | KeyError: 'refund'")
        );
        assert_eq!(
            stderr_lines("oops\n2026-01-01T00:00:00Z  INFO tollgate: forged\r\u{1b}[2K").as_deref(),
            Some("oops\n  | 2026-01-01T00:00:00Z  INFO tollgate: forged\\r\\u{1b}[2K"),
            "no line of it starts a host log line, and other controls stay escaped"
        );
        assert_eq!(stderr_lines(" \n\n"), None);
        assert_eq!(escape_controls("plain text é"), "plain text é");
        assert_eq!(
            escape_controls("ok\n2026-01-01T00:00:00Z  INFO tollgate: forged\r\u{1b}[2K\u{7}"),
            "ok\\n2026-01-01T00:00:00Z  INFO tollgate: forged\\r\\u{1b}[2K\\u{7}"
        );
        assert_eq!(escape_controls("a\\nb"), "a\\\\nb", "a literal backslash-n stays distinguishable");
        assert_eq!(escape_controls("tab\there\u{85}"), "tab\\there\\u{85}");
        assert_eq!(escape_controls("x\u{2028}y\u{202e}z"), "x\\u{2028}y\\u{202e}z");
    }

    #[test]
    fn truncate_keeps_whole_characters() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
