//! The egress proxy: besides the model proxy, the only way out of an agent's box. Each box gets a
//! Unix socket of its own ([`tollgate_box::SocketServer`]), relayed onto its loopback and named in
//! its `HTTPS_PROXY`/`HTTP_PROXY`, so every connection is known by its box and checked against the
//! agent's `[sandbox] allowed_outbound_hosts` (the tools' syntax,
//! [`tollgate_sandbox::AllowedHosts`]).
//!
//! Read [`Egress`]. It serves HTTP/1.1 on each socket:
//!
//! - `CONNECT host:port` (HTTPS, and anything tunnelled): allowed when an entry admits `https`
//!   (or `*`) to that host and port; then a tunnel to it;
//! - an absolute-form request (`GET http://host/path`, plain HTTP through a proxy): allowed when an
//!   entry admits `http` to it; then forwarded in origin form;
//! - anything else: 400.
//!
//! The entry that admits a destination decides ([`tollgate_sandbox::allow::Grant`]); a host name
//! is then resolved here, by the Worker, and an address of this machine or its link (loopback,
//! unspecified, link-local such as a cloud's metadata service at 169.254.169.254) is refused
//! unless the entry names that address itself, so neither a wildcard nor a name an attacker's DNS
//! points at `127.0.0.1` reaches the Worker's API or database. Every connection is logged with its box, destination
//! and decision; a refused one gets `403` with a text that says why, which is what the agent's
//! command (and so the model) reads.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tollgate_box::{SocketServer, SocketServerGuard};
use tollgate_sandbox::AllowedHosts;
use tracing::{info, warn};

/// How long a connection to a destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

type Body = BoxBody<Bytes, hyper::Error>;

/// The egress proxy of one agent's boxes. See the module docs.
#[derive(Debug, Clone)]
pub struct Egress {
    allowed: Arc<AllowedHosts>,
}

impl Egress {
    /// A proxy that lets the agent's processes reach `allowed` and nothing else.
    pub fn new(allowed: AllowedHosts) -> Egress {
        Egress { allowed: Arc::new(allowed) }
    }
}

impl SocketServer for Egress {
    fn serve(&self, listener: UnixListener, box_name: &str) -> std::io::Result<SocketServerGuard> {
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let _entered = runtime.enter();
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let allowed = self.allowed.clone();
        let name: Arc<str> = box_name.into();
        let task = runtime.spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let (allowed, name) = (allowed.clone(), name.clone());
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        handle(request, allowed.clone(), name.clone())
                    });
                    let served = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                    if let Err(err) = served {
                        tracing::debug!(%err, "an egress connection ended with an error");
                    }
                });
                // Reap the finished ones as it goes.
                while connections.try_join_next().is_some() {}
            }
        });
        // The box's connections die with it: the task (and its JoinSet) is aborted on drop.
        Ok(SocketServerGuard::new(AbortOnDrop(task)))
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn handle(
    request: Request<Incoming>,
    allowed: Arc<AllowedHosts>,
    name: Arc<str>,
) -> Result<Response<Body>, hyper::Error> {
    let is_connect = request.method() == Method::CONNECT;
    let Some((scheme, host, port)) = destination(&request) else {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            "tollgate egress proxy: send CONNECT host:port, or an absolute http:// URL".into(),
        ));
    };
    let target = format!("{host}:{port}");
    let checked = if is_connect {
        allowed.check_connect(&authority(&host, port))
    } else {
        allowed.check_http(scheme, &host, Some(port))
    };
    let grant = match checked {
        Ok(grant) => grant,
        Err(denied) => {
            info!(r#box = %name, destination = %target, scheme, decision = "denied", reason = %denied, "egress connection");
            return Ok(text(
                StatusCode::FORBIDDEN,
                format!(
                    "tollgate egress proxy: the connection to {target} was denied: {denied} (the agent's [sandbox] \
                     allowed_outbound_hosts: {allowed})"
                ),
            ));
        }
    };
    let addrs = match resolve(&host, port).await {
        Ok(addrs) => addrs,
        Err(reason) => {
            info!(r#box = %name, destination = %target, decision = "failed", %reason, "egress connection");
            return Ok(text(StatusCode::BAD_GATEWAY, format!("tollgate egress proxy: {reason}")));
        }
    };
    // A name may resolve to this machine: only an entry that names the address reaches it.
    let (usable, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
        addrs.into_iter().partition(|addr| grant.admits_address(addr.ip()));
    if usable.is_empty() {
        let first = refused.first().map(|a| a.ip().to_string()).unwrap_or_default();
        info!(r#box = %name, destination = %target, entry = grant.entry, address = %first, decision = "denied",
            "egress connection to an address of this machine");
        return Ok(text(
            StatusCode::FORBIDDEN,
            format!(
                "tollgate egress proxy: the connection to {target} was denied: it resolves to {first}, an address of \
                 this machine or its link, which only an allowed_outbound_hosts entry naming that address opens \
                 (it matched `{}`)",
                grant.entry
            ),
        ));
    }
    let upstream = match connect(&usable).await {
        Ok(upstream) => upstream,
        Err(err) => {
            info!(r#box = %name, destination = %target, decision = "failed", %err, "egress connection");
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("tollgate egress proxy: {target} could not be reached: {err}"),
            ));
        }
    };
    let address = upstream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(r#box = %name, destination = %target, scheme, entry = grant.entry, %address, decision = "allowed", "egress connection");
    if is_connect {
        tokio::spawn(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let mut upstream = upstream;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
                Err(err) => warn!(%err, "the egress tunnel could not be opened"),
            }
        });
        return Ok(Response::new(empty()));
    }
    forward(request, upstream).await
}

/// `host:port`, an IPv6 address in brackets.
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The scheme the allow-list is asked about, the host (without brackets) and the port of a proxy
/// request.
fn destination(request: &Request<Incoming>) -> Option<(&'static str, String, u16)> {
    let uri = request.uri();
    let unbracket = |host: &str| host.trim_start_matches('[').trim_end_matches(']').to_owned();
    if request.method() == Method::CONNECT {
        let authority = uri.authority()?;
        return Some(("https", unbracket(authority.host()), authority.port_u16()?));
    }
    match uri.scheme_str()? {
        "http" => Some(("http", unbracket(uri.host()?), uri.port_u16().unwrap_or(80))),
        _ => None,
    }
}

/// The addresses of `host` (itself, when it is one).
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|err| format!("{host} could not be resolved: {err}"))?
        .collect();
    if found.is_empty() {
        return Err(format!("{host} has no address"));
    }
    Ok(found)
}

async fn connect(addrs: &[SocketAddr]) -> std::io::Result<tokio::net::TcpStream> {
    let mut last = std::io::Error::other("no address");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(err)) => last = err,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "the connection timed out"),
        }
    }
    Err(last)
}

/// Sends `request` to `upstream` in origin form and streams the answer back.
async fn forward(
    mut request: Request<Incoming>,
    upstream: tokio::net::TcpStream,
) -> Result<Response<Body>, hyper::Error> {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    *request.uri_mut() = path.parse().unwrap_or_default();
    for hop in ["proxy-connection", "proxy-authorization"] {
        request.headers_mut().remove(hop);
    }
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender.send_request(request).await?;
    Ok(response.map(BodyExt::boxed))
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut response =
        Response::new(Full::new(Bytes::from(message + "\n")).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_that_resolves_to_this_machine_is_admitted_only_by_an_entry_naming_the_address() {
        let wildcard = AllowedHosts::parse(&["http://*:8080"]).unwrap();
        let grant = wildcard.check_http("http", "localhost", Some(8080)).unwrap();
        let addrs = resolve("localhost", 8080).await.unwrap();
        assert!(addrs.iter().all(|a| !grant.admits_address(a.ip())), "{addrs:?}");
        let named = AllowedHosts::parse(&["http://127.0.0.1:8080"]).unwrap();
        let grant = named.check_connect("127.0.0.1:8080").unwrap();
        assert!(grant.admits_address("127.0.0.1".parse().unwrap()));
        assert!(!grant.admits_address("169.254.169.254".parse().unwrap()));
        assert_eq!(authority("::1", 9), "[::1]:9");
    }
}
