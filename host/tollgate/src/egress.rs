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
//! A host name is resolved here, by the Worker; an address it resolves to on this machine's own
//! networks (loopback, unspecified, link-local such as a cloud's metadata service at
//! 169.254.169.254) is refused unless the entry names that address itself, so a name cannot be
//! pointed at the Worker's API or database. Every connection is logged with its box, destination
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
    let (scheme, host, port) = match destination(&request) {
        Some(found) => found,
        None => {
            return Ok(text(
                StatusCode::BAD_REQUEST,
                "tollgate egress proxy: send CONNECT host:port, or an absolute http:// URL".into(),
            ));
        }
    };
    let target = format!("{host}:{port}");
    if !allowed.allows_http(scheme, &host, Some(port)) {
        info!(r#box = %name, destination = %target, scheme, decision = "denied", "egress connection");
        return Ok(text(
            StatusCode::FORBIDDEN,
            format!(
                "tollgate egress proxy: the connection to {target} was denied: {scheme}://{target} is not in the \
                 agent's [sandbox] allowed_outbound_hosts (allowed: {allowed})"
            ),
        ));
    }
    let addrs = match resolve(&host, port, &allowed).await {
        Ok(addrs) => addrs,
        Err(reason) => {
            info!(r#box = %name, destination = %target, decision = "denied", %reason, "egress connection");
            return Ok(text(
                StatusCode::FORBIDDEN,
                format!("tollgate egress proxy: the connection to {target} was denied: {reason}"),
            ));
        }
    };
    let upstream = match connect(&addrs).await {
        Ok(upstream) => upstream,
        Err(err) => {
            info!(r#box = %name, destination = %target, decision = "failed", %err, "egress connection");
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("tollgate egress proxy: {target} could not be reached: {err}"),
            ));
        }
    };
    info!(r#box = %name, destination = %target, scheme, address = %upstream.peer_addr().map(|a| a.to_string()).unwrap_or_default(), decision = "allowed", "egress connection");
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

/// The scheme the allow-list is asked about, the host and the port of a proxy request.
fn destination(request: &Request<Incoming>) -> Option<(&'static str, String, u16)> {
    let uri = request.uri();
    if request.method() == Method::CONNECT {
        let authority = uri.authority()?;
        return Some((
            "https",
            authority.host().trim_start_matches('[').trim_end_matches(']').to_owned(),
            authority.port_u16()?,
        ));
    }
    let scheme = match uri.scheme_str()? {
        "http" => "http",
        _ => return None,
    };
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_owned();
    Some((scheme, host, uri.port_u16().unwrap_or(80)))
}

/// The addresses of `host`, those on this machine's own networks refused unless `host` is that
/// address written out.
async fn resolve(host: &str, port: u16, allowed: &AllowedHosts) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        if local(ip) && !names_address(allowed, ip) {
            return Err(format!(
                "{ip} is an address of this machine's own networks; only an allowed_outbound_hosts entry that names                  it (not a wildcard) opens it"
            ));
        }
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|err| format!("{host} could not be resolved: {err}"))?
        .collect();
    let usable: Vec<SocketAddr> = found.iter().copied().filter(|addr| !local(addr.ip())).collect();
    if usable.is_empty() {
        return Err(match found.first() {
            Some(addr) => format!(
                "{host} resolves to {}, an address of this machine's own networks; name the address itself in \
                 allowed_outbound_hosts to reach it",
                addr.ip()
            ),
            None => format!("{host} has no address"),
        });
    }
    Ok(usable)
}

/// Whether an entry of `allowed` names `ip` as its host, written out.
fn names_address(allowed: &AllowedHosts, ip: IpAddr) -> bool {
    allowed.entries().any(|entry| {
        let host = entry.split_once("://").map_or(entry, |(_, rest)| rest);
        let host = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(host, _)| host),
        };
        host.parse::<IpAddr>().is_ok_and(|named| canonical(named) == canonical(ip))
    })
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Loopback, unspecified, link-local (v4 and v6, IPv4-mapped included).
fn local(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local(),
    }
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

    #[test]
    fn addresses_of_this_machines_own_networks_are_local_in_every_spelling() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "169.254.169.254",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(local(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "10.0.0.5", "2606:2800:220:1::"] {
            assert!(!local(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn a_local_address_is_reached_only_when_an_entry_writes_it_out() {
        let wildcard = AllowedHosts::parse(&["http://*:8080"]).unwrap();
        let refused = resolve("localhost", 8080, &wildcard).await.unwrap_err();
        assert!(refused.contains("an address of this machine's own networks"), "{refused}");
        let refused = resolve("127.0.0.1", 8080, &wildcard).await.unwrap_err();
        assert!(refused.contains("not a wildcard"), "{refused}");
        let named = AllowedHosts::parse(&["http://127.0.0.1:8080", "http://[::1]:8080"]).unwrap();
        assert_eq!(resolve("127.0.0.1", 8080, &named).await.unwrap(), ["127.0.0.1:8080".parse().unwrap()]);
        assert!(resolve("::1", 8080, &named).await.is_ok());
        assert!(resolve("::ffff:127.0.0.1", 8080, &named).await.is_ok(), "the same address, mapped");
        assert!(resolve("169.254.169.254", 80, &named).await.is_err());
    }
}
