//! One tool, `zero_writes`, that writes zero-length buffers in a loop through raw `wasi:io`
//! output streams: stdout, stderr, or the body of an outgoing `wasi:http` request. Each empty
//! write costs the guest almost nothing; what it costs the host is what the sandbox's
//! `limits` tests measure (wasmtime advisories on zero-length stream writes and empty HTTP body
//! writes, fixed upstream after the `wasmtime-wasi` and `wasmtime-wasi-http` we build on).
//!
//! A `write` of nothing passes every `check-write` budget, so a guest can queue them without
//! waiting; `blocking-write-and-flush` waits for the host to drain what was queued.
//!
//! The loop stops after `ms` milliseconds of the guest's clock or `count` writes, whichever
//! comes first, and answers how many writes it made; a write the host refuses ends it early with
//! a failure that says so. A trap ends the call.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use tollgate_guest::{CallError, tool};
use wasip2::io::streams::{OutputStream, StreamError};

/// Where the empty buffers go.
#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Target {
    /// `wasi:cli/stdout`: `write` after `write`, a `blocking-write-and-flush` every `flush_every`.
    Stdout,
    /// `wasi:cli/stderr`, the same.
    Stderr,
    /// The body of a POST to `http://{authority}/zero`, `write` after `write` without asking
    /// `check-write` first.
    Body,
    /// The same body, each `write` after a `check-write` that permits it (waiting while it does
    /// not): every empty write is one the stream accepted.
    CheckedBody,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ZeroWrites {
    target: Target,
    /// How long to loop, in milliseconds.
    ms: u64,
    /// The most writes to make.
    count: u64,
    /// On stdout and stderr, make every `flush_every`th write a `blocking-write-and-flush`
    /// (which waits for the host to drain the stream); 0 for never.
    #[serde(default)]
    flush_every: u64,
    /// `host:port` of the request's destination (the body targets only).
    #[serde(default)]
    authority: Option<String>,
}

/// Writes zero-length buffers to `target` for `ms` milliseconds or `count` writes, then says
/// how many it wrote.
#[tool(read_only)]
fn zero_writes(args: ZeroWrites) -> Result<String, CallError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(args.ms);
    let more = |written: u64| written < args.count && std::time::Instant::now() < deadline;
    let refused = |written: u64, what: &str, e: StreamError| {
        CallError::failed(format!("after {written} empty writes, {what} failed: {e:?}"))
    };
    let mut written = 0u64;
    match args.target {
        Target::Stdout | Target::Stderr => {
            let stream = if args.target == Target::Stdout {
                wasip2::cli::stdout::get_stdout()
            } else {
                wasip2::cli::stderr::get_stderr()
            };
            while more(written) {
                let result = if args.flush_every > 0 && (written + 1).is_multiple_of(args.flush_every) {
                    stream.blocking_write_and_flush(&[])
                } else {
                    stream.write(&[])
                };
                result.map_err(|e| refused(written, "write", e))?;
                written += 1;
            }
            Ok(format!("wrote {written} empty buffers"))
        }
        Target::Body | Target::CheckedBody => {
            let authority =
                args.authority.as_deref().ok_or(CallError::failed("the body targets need an authority"))?;
            let (request, body, stream) = post(authority)?;
            while more(written) {
                if args.target == Target::CheckedBody {
                    wait_for_permit(&stream).map_err(|e| refused(written, "check-write", e))?;
                }
                stream.write(&[]).map_err(|e| refused(written, "write", e))?;
                written += 1;
            }
            drop(stream);
            let _ = wasip2::http::types::OutgoingBody::finish(body, None);
            request.subscribe().block();
            let answer = match request.get() {
                Some(Ok(Ok(response))) => format!("status {}", response.status()),
                Some(Ok(Err(code))) => format!("{code:?}"),
                _ => "no response".into(),
            };
            Ok(format!("wrote {written} empty buffers; {answer}"))
        }
    }
}

/// Blocks until `stream` permits a write.
fn wait_for_permit(stream: &OutputStream) -> Result<(), StreamError> {
    while stream.check_write()? == 0 {
        stream.subscribe().block();
    }
    Ok(())
}

/// Starts a POST to `http://{authority}/zero` and opens its body.
fn post(
    authority: &str,
) -> Result<
    (wasip2::http::types::FutureIncomingResponse, wasip2::http::types::OutgoingBody, OutputStream),
    CallError,
> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

    let request = OutgoingRequest::new(Fields::new());
    let refused = |what: &str| CallError::failed(format!("{what} refused"));
    request.set_method(&Method::Post).map_err(|()| refused("method"))?;
    request.set_scheme(Some(&Scheme::Http)).map_err(|()| refused("scheme"))?;
    request.set_authority(Some(authority)).map_err(|()| refused("authority"))?;
    request.set_path_with_query(Some("/zero")).map_err(|()| refused("path"))?;
    let body = request.body().map_err(|()| refused("body"))?;
    let pending =
        outgoing_handler::handle(request, None).map_err(|e| CallError::failed(format!("handle: {e:?}")))?;
    let stream = body.write().map_err(|()| refused("body stream"))?;
    Ok((pending, body, stream))
}

tollgate_guest::export_tools!(zero_writes);
