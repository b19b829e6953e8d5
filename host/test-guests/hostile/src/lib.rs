//! A tool component that misbehaves on purpose, one tool per way a guest can attack or fail its
//! host. The sandbox's tests call each and check the error and that the next call still works.

use schemars::JsonSchema;
use serde::Deserialize;
use tollgate_guest::http::Request;
use tollgate_guest::{CallError, Context, NoArguments, Output, config, log, tool};

#[derive(Deserialize, JsonSchema)]
struct Text {
    text: String,
}

/// Returns its text and the call's attempt and idempotency key.
#[tool(read_only)]
fn echo(args: Text, cx: &Context) -> String {
    format!("{} (attempt {}, key {:?})", args.text, cx.attempt(), cx.idempotency_key())
}

/// Loops forever.
#[tool(read_only)]
fn spin(_: NoArguments) -> String {
    let mut i: u64 = 0;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

/// Allocates 1 MiB chunks until something gives.
#[tool(read_only)]
fn memory_bomb(_: NoArguments) -> String {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        chunk[0] = 1;
        hoard.push(std::hint::black_box(chunk));
    }
}

#[inline(never)]
#[allow(unconditional_recursion)] // The point: recursion without end.
fn deeper(n: u64, buf: &mut [u8; 256]) -> u64 {
    buf[(n % 256) as usize] = n as u8;
    let mut next = [0u8; 256];
    std::hint::black_box(&mut next);
    deeper(n + 1, &mut next) + u64::from(buf[0])
}

/// Recurses without bound.
#[tool(read_only)]
fn recurse(_: NoArguments) -> String {
    let mut buf = [0u8; 256];
    deeper(0, &mut buf).to_string()
}

/// Panics with the message "boom".
#[tool(read_only)]
fn panic(_: NoArguments) -> String {
    panic!("boom")
}

#[derive(Deserialize, JsonSchema)]
struct Size {
    megabytes: u32,
}

/// Returns `megabytes` MiB of text.
#[tool(read_only)]
fn big_output(args: Size) -> String {
    "x".repeat((args.megabytes as usize) << 20)
}

/// Writes `megabytes` MiB to stdout and stderr, then returns "done".
#[tool(read_only)]
fn print_flood(args: Size) -> String {
    use std::io::Write;
    let line = [b'y'; 1024];
    for _ in 0..(args.megabytes as usize) << 10 {
        let _ = std::io::stdout().write_all(&line);
        let _ = std::io::stderr().write_all(&line);
    }
    "done".into()
}

#[derive(Deserialize, JsonSchema)]
struct Count {
    count: u32,
}

/// Writes `count` log messages of 10 KiB each.
#[tool(read_only)]
fn log_flood(args: Count) -> String {
    let message = "z".repeat(10 << 10);
    for _ in 0..args.count {
        log::info(&message);
    }
    "logged".into()
}

#[derive(Deserialize, JsonSchema)]
struct Path {
    path: String,
}

/// Reads a file.
#[tool(read_only)]
fn read_file(args: Path) -> Result<String, CallError> {
    std::fs::read_to_string(&args.path).map_err(|e| CallError::failed(format!("read {}: {e}", args.path)))
}

#[derive(Deserialize, JsonSchema)]
struct WriteFile {
    path: String,
    content: String,
}

/// Writes a file.
#[tool]
fn write_file(args: WriteFile) -> Result<String, CallError> {
    std::fs::write(&args.path, &args.content)
        .map_err(|e| CallError::failed(format!("write {}: {e}", args.path)))?;
    Ok("written".into())
}

#[derive(Deserialize, JsonSchema)]
struct Name {
    name: String,
}

/// Reads an environment variable and lists the whole environment.
#[tool(read_only)]
fn read_env(args: Name) -> String {
    format!("{:?} of {} variables", std::env::var(&args.name).ok(), std::env::vars().count())
}

/// Reads a config key.
#[tool(read_only)]
fn config_get(args: Name) -> String {
    format!("{:?}", config::get(&args.name))
}

#[derive(Deserialize, JsonSchema)]
struct Url {
    url: String,
}

/// GETs a URL through wasi:http.
#[tool(read_only)]
fn http_get(args: Url) -> Result<String, CallError> {
    let response = Request::get(&args.url).send()?;
    Ok(format!("{} {}", response.status, response.text()))
}

#[derive(Deserialize, JsonSchema)]
struct Address {
    addr: String,
}

/// Opens a raw TCP connection.
#[tool(read_only)]
fn tcp_connect(args: Address) -> Result<String, CallError> {
    std::net::TcpStream::connect(&args.addr)
        .map_err(|e| CallError::failed(format!("connect {}: {e}", args.addr)))?;
    Ok("connected".into())
}

#[derive(Deserialize, JsonSchema)]
struct Millis {
    ms: u64,
}

/// Sleeps, then answers.
#[tool(read_only)]
fn sleep(args: Millis) -> String {
    std::thread::sleep(std::time::Duration::from_millis(args.ms));
    "awake".into()
}

/// Fails with a retryable error on attempts 1 and 2, then succeeds with the idempotency key.
#[tool(idempotent)]
fn flaky(_: NoArguments, cx: &Context) -> Result<Output, CallError> {
    if cx.attempt() < 3 {
        return Err(CallError::retryable(format!("try again (attempt {})", cx.attempt())));
    }
    Ok(Output::text(format!(
        "ok on attempt {} with key {}",
        cx.attempt(),
        cx.idempotency_key().unwrap_or("-")
    )))
}

static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Counts its calls in a static: a fresh instance per call always answers 1.
#[tool(read_only)]
fn counter(_: NoArguments) -> String {
    (CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1).to_string()
}

tollgate_guest::export_tools!(
    echo,
    counter,
    spin,
    memory_bomb,
    recurse,
    panic,
    big_output,
    print_flood,
    log_flood,
    read_file,
    write_file,
    read_env,
    config_get,
    http_get,
    tcp_connect,
    sleep,
    flaky,
);
