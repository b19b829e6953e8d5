//! The outbound allow-list of a component, in Spin's `allowed_outbound_hosts` syntax. Pure.
//!
//! Each entry is `scheme://host[:port]`:
//!
//! | entry | allows |
//! | --- | --- |
//! | `https://api.example.com` | HTTPS to that host on port 443 |
//! | `https://*.example.com:8443` | HTTPS to any subdomain (not the apex) on port 8443 |
//! | `http://127.0.0.1:*` | plain HTTP to 127.0.0.1 on any port |
//! | `http://[::1]:8080` | plain HTTP to the IPv6 loopback address on port 8080 |
//! | `*://example.com:8080` | any scheme to that host and port |
//! | `tcp://10.0.0.5:5432` | a raw TCP connection (`wasi:sockets`) to that IP address and port |
//!
//! A port left out means the scheme's default (80 for `http`, 443 for `https`); `*` as the scheme
//! needs an explicit port. Paths, queries, user names and `tcp://` host names are refused: name
//! lookup is not available to tools, so a TCP grant names an IP address.
//!
//! # Addresses
//!
//! An IP address is compared as an address, never as text, in an entry and in a destination:
//! - IPv6 goes in brackets (in an entry and a `CONNECT`), in any valid spelling: `[0:0::1]` is
//!   `[::1]`. An IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) is its IPv4 address, so it
//!   matches `127.0.0.1` and the other way round. An IPv4-*compatible* one (`[::127.0.0.1]`) is
//!   another address; zone IDs are refused.
//! - IPv4 is written in dotted decimal: four numbers from 0 to 255 without leading zeros. A
//!   resolver also reads `127.1`, `2130706433`, `0x7f.1` and `0177.0.0.1` as 127.0.0.1, and
//!   `127.0.0.010` as 127.0.0.8 (a leading 0 is octal), where a reader sees a name or another
//!   address. So a host that ends in a number and is not in that form is refused, whatever the
//!   list says (a `*` entry included): an entry when the list is parsed, a destination when it is
//!   checked; the error names the address a resolver would read. No top-level domain is a number,
//!   so no real name is lost.
//! - Names and addresses never match each other: `localhost` is not `127.0.0.1`, and a wildcard
//!   (`*.example.com`) covers names only, so its domain may not end in a number.
//!
//! # For an HTTP proxy
//!
//! [`AllowedHosts::check_http`] (a request's scheme, host and port) and
//! [`AllowedHosts::check_connect`] (the `host:port` of a `CONNECT`) say which entry admitted a
//! destination, as a [`Grant`], or why none did, as a [`Denied`] (its text is fit for the agent to
//! read). A tunnel carries whatever its client speaks, so a `CONNECT` is admitted by an entry of
//! any scheme that names its host and port.
//!
//! A name is resolved after the check; the proxy then asks [`Grant::admits_address`] about each
//! address it is about to connect to. An entry that named an address admits that address; an entry
//! that named a name or a wildcard admits no address of the machine or its link (loopback,
//! unspecified, link-local: where a cloud's metadata service answers), so `*.example.com`, or a
//! name that an attacker's DNS points at `127.0.0.1`, reaches no local service. Grant a local
//! service by its address: `http://127.0.0.1:8080`.
//!
//! ```
//! use tollgate_sandbox::allow::{AllowedHosts, GrantedBy};
//!
//! let list = AllowedHosts::parse(&["https://*.example.com", "http://127.0.0.1:8080"])?;
//! // A CONNECT to a name: the wildcard admits it; then each address the name resolves to.
//! let grant = list.check_connect("api.example.com:443")?;
//! assert_eq!(grant.by, GrantedBy::Subdomain);
//! assert!(grant.admits_address("93.184.216.34".parse()?));
//! assert!(!grant.admits_address("127.0.0.1".parse()?), "a name never reaches this machine");
//! // A local service, granted by its address, in any spelling of it.
//! let grant = list.check_http("http", "[::ffff:127.0.0.1]", Some(8080))?;
//! assert!(grant.names_address() && grant.admits_address("127.0.0.1".parse()?));
//! // Another spelling of an address is refused, naming the address a resolver would read.
//! let refused = list.check_http("http", "2130706433", Some(8080)).unwrap_err();
//! assert!(refused.to_string().contains("127.0.0.1"), "{refused}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Read [`AllowedHosts`] first. The enforcement is elsewhere: the `wasi:http` hook and the
//! `wasi:sockets` address check in `state.rs` ask [`AllowedHosts::allows_http`] and
//! [`AllowedHosts::allows_tcp`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an allow-list entry was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("allowed_outbound_hosts entry `{entry}`: {reason}")]
pub struct AllowListError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A destination host as the allow-list reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// An IP address; an IPv4-mapped IPv6 address is held as its IPv4 address.
    Address(IpAddr),
    /// A DNS name: lowercase, without a trailing dot, never ending in a number.
    Name(String),
}

impl Host {
    /// Reads a host as a URL or a `CONNECT` carries it: `[IPv6]` (or bare IPv6), dotted-decimal
    /// IPv4, or a name. Refuses any other spelling of an address (see the module docs).
    pub fn parse(text: &str) -> Result<Self, HostError> {
        read_host(text).map_err(|reason| HostError { host: text.to_string(), reason })
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Address(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Address(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// A destination host that cannot be checked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("host `{host}`: {reason}")]
pub struct HostError {
    /// The host as given.
    pub host: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Why a destination was not admitted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Denied {
    /// The host is no address or name the list can be checked against.
    #[error("outbound connection refused: {0}")]
    Host(#[from] HostError),
    /// An HTTP request whose scheme is neither `http` nor `https`.
    #[error("outbound connection refused: scheme `{0}` is not http or https")]
    Scheme(String),
    /// A `CONNECT` whose destination is not `host:port`.
    #[error("outbound connection refused: `{0}` is not `host:port` (an IPv6 address in brackets)")]
    Authority(String),
    /// No entry names the destination.
    #[error("outbound connection refused: {0} is not on the allow-list")]
    NotListed(String),
}

/// How the entry that admitted a destination named its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantedBy {
    /// An IP address (`http://127.0.0.1:8080`): the destination was that address.
    Address(IpAddr),
    /// A name (`https://api.example.com`).
    Name,
    /// A subdomain wildcard (`https://*.example.com`).
    Subdomain,
    /// Any host (`https://*`).
    AnyHost,
}

/// The entry that admitted a destination: of all that do, the most specific (an address, then a
/// name, then a subdomain wildcard, then `*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant<'a> {
    /// The entry as written.
    pub entry: &'a str,
    /// How it named the host.
    pub by: GrantedBy,
}

impl Grant<'_> {
    /// Whether the entry named an IP address rather than a name or a wildcard.
    pub fn names_address(&self) -> bool {
        matches!(self.by, GrantedBy::Address(_))
    }

    /// Whether a connection to `address` (the destination's address, or one its name resolved
    /// to) is admitted: an address entry admits exactly its address; a name or wildcard entry
    /// admits any address but the machine's own and its link's (loopback, unspecified,
    /// link-local), IPv4-mapped ones included.
    pub fn admits_address(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        match self.by {
            GrantedBy::Address(granted) => granted == address,
            GrantedBy::Name | GrantedBy::Subdomain | GrantedBy::AnyHost => !is_machine_or_link(address),
        }
    }
}

/// Loopback, unspecified (`0.0.0.0/8` and `::`, which reach this machine) and link-local.
fn is_machine_or_link(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback() || v4.octets()[0] == 0 || v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local(),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum SchemeMatch {
    Any,
    Http,
    Https,
    Tcp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostMatch {
    Any,
    Address(IpAddr),
    Name(String),
    /// `*.example.com` stored as `.example.com`.
    Subdomain(String),
}

impl HostMatch {
    /// How this entry host admits `host`, if it does.
    fn grant(&self, host: &Host) -> Option<GrantedBy> {
        match (self, host) {
            (HostMatch::Any, _) => Some(GrantedBy::AnyHost),
            (HostMatch::Address(granted), Host::Address(address)) if granted == address => {
                Some(GrantedBy::Address(*granted))
            }
            (HostMatch::Name(granted), Host::Name(name)) if granted == name => Some(GrantedBy::Name),
            (HostMatch::Subdomain(suffix), Host::Name(name))
                if name.len() > suffix.len() && name.ends_with(suffix.as_str()) =>
            {
                Some(GrantedBy::Subdomain)
            }
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PortMatch {
    Any,
    Exact(u16),
}

impl PortMatch {
    fn matches(&self, port: u16) -> bool {
        match self {
            PortMatch::Any => true,
            PortMatch::Exact(p) => *p == port,
        }
    }
}

/// One parsed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    written: String,
    scheme: SchemeMatch,
    host: HostMatch,
    port: PortMatch,
}

/// A parsed allow-list. Empty denies everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    entries: Vec<Entry>,
}

impl AllowedHosts {
    /// Parses every entry; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, AllowListError> {
        let entries = entries.iter().map(|e| parse_entry(e.as_ref())).collect::<Result<_, _>>()?;
        Ok(Self { entries })
    }

    /// Nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as written.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.written.as_str())
    }

    /// Whether an HTTP request with this scheme (`http` or `https`), host (as the URL carries
    /// it: `[::1]`, `127.0.0.1`, `api.example.com`) and port (`None`: the scheme's default) may
    /// go out.
    pub fn allows_http(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        self.check_http(scheme, host, port).is_ok()
    }

    /// Which entry admits an HTTP request with this scheme, host and port (`None`: the scheme's
    /// default), or why none does.
    pub fn check_http(&self, scheme: &str, host: &str, port: Option<u16>) -> Result<Grant<'_>, Denied> {
        let scheme = scheme.to_ascii_lowercase();
        let (wanted, default_port) = match scheme.as_str() {
            "http" => (SchemeMatch::Http, 80),
            "https" => (SchemeMatch::Https, 443),
            _ => return Err(Denied::Scheme(scheme)),
        };
        let host = Host::parse(host)?;
        let port = port.unwrap_or(default_port);
        self.best_grant(&host, port, |s| *s == wanted || *s == SchemeMatch::Any)
            .ok_or_else(|| Denied::NotListed(format!("{scheme}://{host}:{port}")))
    }

    /// Which entry admits a `CONNECT` to `authority` (`host:port`, an IPv6 address in brackets),
    /// or why none does. An entry of any scheme admits it: the tunnel's content is not seen.
    pub fn check_connect(&self, authority: &str) -> Result<Grant<'_>, Denied> {
        let bad = || Denied::Authority(authority.to_string());
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
            return Err(bad());
        }
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(bad()),
        };
        let host = Host::parse(host)?;
        self.best_grant(&host, port, |_| true).ok_or_else(|| Denied::NotListed(format!("{host}:{port}")))
    }

    /// Whether a raw TCP connection to `addr` may be opened.
    pub fn allows_tcp(&self, addr: SocketAddr) -> bool {
        let host = Host::Address(addr.ip().to_canonical());
        self.best_grant(&host, addr.port(), |s| matches!(s, SchemeMatch::Tcp | SchemeMatch::Any)).is_some()
    }

    /// Whether any entry could allow a TCP connection (so sockets need linking at all).
    pub fn any_tcp(&self) -> bool {
        self.entries.iter().any(|e| matches!(e.scheme, SchemeMatch::Tcp | SchemeMatch::Any))
    }

    /// The most specific entry of a scheme `scheme_ok` accepts that admits `host` on `port`.
    fn best_grant(
        &self,
        host: &Host,
        port: u16,
        scheme_ok: impl Fn(&SchemeMatch) -> bool,
    ) -> Option<Grant<'_>> {
        let specificity = |by: &GrantedBy| match by {
            GrantedBy::Address(_) => 3,
            GrantedBy::Name => 2,
            GrantedBy::Subdomain => 1,
            GrantedBy::AnyHost => 0,
        };
        self.entries
            .iter()
            .filter(|e| scheme_ok(&e.scheme) && e.port.matches(port))
            .filter_map(|e| Some(Grant { entry: &e.written, by: e.host.grant(host)? }))
            .min_by_key(|g| std::cmp::Reverse(specificity(&g.by)))
    }
}

impl fmt::Display for AllowedHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("none");
        }
        let written: Vec<&str> = self.entries().collect();
        f.write_str(&written.join(", "))
    }
}

/// Reads a host; the error is the reason, to go with the host or entry as written.
fn read_host(text: &str) -> Result<Host, String> {
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or("an IPv6 address needs a closing `]`")?;
        return read_ipv6(inner);
    }
    if text.contains(':') {
        return read_ipv6(text);
    }
    let lower = text.to_ascii_lowercase();
    if let Ok(v4) = lower.parse::<Ipv4Addr>() {
        return Ok(Host::Address(IpAddr::V4(v4)));
    }
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if ends_in_number(name) {
        return Err(match resolver_ipv4(name) {
            Some(address) => format!(
                "a resolver reads this as the IPv4 address {address}; write it as `{address}` \
                 (dotted decimal, no leading zeros)"
            ),
            None => "it ends in a number but is no IPv4 address, and no host name ends in a number".into(),
        });
    }
    check_name(name)?;
    Ok(Host::Name(name.to_string()))
}

fn read_ipv6(text: &str) -> Result<Host, String> {
    text.parse::<Ipv6Addr>()
        .map(|v6| Host::Address(IpAddr::V6(v6).to_canonical()))
        .map_err(|_| format!("`{text}` is not an IPv6 address"))
}

/// Whether a name's last label is a number, as a resolver would read it (`1`, `0x1f`, `0x`):
/// then the whole host is an IPv4 address to a resolver, or nothing.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    match last.strip_prefix("0x") {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// The IPv4 address a resolver (`inet_aton`, and URL parsers after it) reads from one to four
/// numbers, each decimal, octal after a leading `0` or hexadecimal after `0x`, the last filling
/// the bytes left: `127.1` is 127.0.0.1, `2130706433` too.
fn resolver_ipv4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) = match part.strip_prefix("0x") {
            Some(hex) => (hex, 16),
            None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
            None => (*part, 10),
        };
        if part.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        let number = if digits.is_empty() { 0 } else { u64::from_str_radix(digits, radix).ok()? };
        numbers.push(number);
    }
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|&n| n > 255) || *last >= 1u64 << (8 * (4 - leading.len())) {
        return None;
    }
    let mut address = *last;
    for (i, n) in leading.iter().enumerate() {
        address |= n << (8 * (3 - i));
    }
    Some(Ipv4Addr::from(u32::try_from(address).ok()?))
}

/// A host name: dot-separated labels of ASCII letters, digits, `-` and `_`, none empty.
fn check_name(name: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("`{name}` is not a host name or IP address"));
    }
    Ok(())
}

fn parse_entry(written: &str) -> Result<Entry, AllowListError> {
    let fail = |reason: &str| AllowListError { entry: written.to_string(), reason: reason.to_string() };
    let Some((scheme, rest)) = written.split_once("://") else {
        return Err(fail("expected `scheme://host[:port]`, such as `https://api.example.com`"));
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "*" => SchemeMatch::Any,
        "http" => SchemeMatch::Http,
        "https" => SchemeMatch::Https,
        "tcp" => SchemeMatch::Tcp,
        other => return Err(fail(&format!("unsupported scheme `{other}`: use http, https, tcp or *"))),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#']) {
        return Err(fail("a path, query or fragment is not allowed: grant a host, not a URL"));
    }
    if rest.contains('@') {
        return Err(fail("a user name is not allowed"));
    }
    // Split off the port, minding IPv6 literals (`[::1]:8080`).
    let (host, port) = if rest.starts_with('[') {
        let Some(close) = rest.find(']') else {
            return Err(fail("an IPv6 address needs a closing `]`"));
        };
        match &rest[close + 1..] {
            "" => (&rest[..=close], None),
            p if p.starts_with(':') => (&rest[..=close], Some(&p[1..])),
            _ => return Err(fail("unexpected text after the IPv6 address")),
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err(fail("an IPv6 address goes in brackets, as in `http://[::1]:8080`"));
            }
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err(fail("no host"));
    }
    let port = match port {
        Some("*") => PortMatch::Any,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => PortMatch::Exact(n),
            _ => return Err(fail(&format!("`{p}` is not a port: use a number from 1 to 65535, or `*`"))),
        },
        None => match scheme {
            SchemeMatch::Http => PortMatch::Exact(80),
            SchemeMatch::Https => PortMatch::Exact(443),
            SchemeMatch::Tcp | SchemeMatch::Any => {
                return Err(fail("this scheme has no default port: write one, or `*`"));
            }
        },
    };
    let host = if host == "*" {
        HostMatch::Any
    } else if let Some(domain) = host.strip_prefix("*.") {
        if domain.contains('*') {
            return Err(fail("a wildcard host is `*` or `*.domain`"));
        }
        let not_a_domain =
            || fail("a wildcard covers names: `*.domain` needs a domain that does not end in a number");
        let lower = domain.to_ascii_lowercase();
        if ends_in_number(lower.strip_suffix('.').unwrap_or(&lower)) {
            return Err(not_a_domain());
        }
        match read_host(domain).map_err(|reason| fail(&reason))? {
            Host::Name(domain) => HostMatch::Subdomain(format!(".{domain}")),
            Host::Address(_) => return Err(not_a_domain()),
        }
    } else if host.contains('*') {
        return Err(fail("a wildcard host is `*` or `*.domain`"));
    } else {
        match read_host(host).map_err(|reason| fail(&reason))? {
            Host::Address(address) => HostMatch::Address(address),
            Host::Name(name) => HostMatch::Name(name),
        }
    };
    if scheme == SchemeMatch::Tcp {
        match host {
            HostMatch::Address(_) => {}
            HostMatch::Name(_) => {
                return Err(fail("a tcp:// grant needs an IP address: tools cannot look names up"));
            }
            HostMatch::Any | HostMatch::Subdomain(_) => {
                return Err(fail("a tcp:// grant needs an exact IP address"));
            }
        }
    }
    Ok(Entry { written: written.to_string(), scheme, host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> AllowedHosts {
        AllowedHosts::parse(entries).unwrap()
    }

    /// Each entry is refused, the error naming it and saying what is expected.
    fn assert_refused(cases: &[(&str, &str)]) {
        for &(entry, expected) in cases {
            let error = AllowedHosts::parse(&[entry]).unwrap_err();
            assert_eq!(error.entry, entry);
            assert!(error.to_string().contains(expected), "{entry}: {error}");
        }
    }

    #[test]
    fn an_empty_list_denies_everything() {
        let a = allow(&[]);
        assert!(!a.allows_http("https", "example.com", None));
        assert!(!a.allows_tcp("127.0.0.1:80".parse().unwrap()));
    }

    #[test]
    fn an_exact_https_host_allows_only_its_default_port_and_scheme() {
        let a = allow(&["https://api.example.com"]);
        assert!(a.allows_http("https", "api.example.com", None));
        assert!(a.allows_http("https", "API.example.com", Some(443)));
        assert!(!a.allows_http("http", "api.example.com", None));
        assert!(!a.allows_http("https", "api.example.com", Some(8443)));
        assert!(!a.allows_http("https", "evil.com", None));
        assert!(!a.allows_http("https", "api.example.com.evil.com", None));
    }

    #[test]
    fn a_subdomain_wildcard_matches_subdomains_but_not_the_apex() {
        let a = allow(&["https://*.example.com:8443"]);
        assert!(a.allows_http("https", "a.example.com", Some(8443)));
        assert!(a.allows_http("https", "a.b.example.com", Some(8443)));
        assert!(!a.allows_http("https", "example.com", Some(8443)));
        assert!(!a.allows_http("https", "notexample.com", Some(8443)));
        assert!(!a.allows_http("https", "a.example.com", None));
    }

    #[test]
    fn a_wildcard_port_and_scheme_match_any() {
        let a = allow(&["http://127.0.0.1:*", "*://example.com:8080"]);
        assert!(a.allows_http("http", "127.0.0.1", Some(41234)));
        assert!(!a.allows_http("https", "127.0.0.1", Some(41234)));
        assert!(!a.allows_http("http", "localhost", Some(41234)));
        assert!(a.allows_http("https", "example.com", Some(8080)));
        assert!(a.allows_http("http", "example.com", Some(8080)));
    }

    #[test]
    fn tcp_grants_name_an_ip_and_port_and_do_not_allow_http() {
        let a = allow(&["tcp://127.0.0.1:5432"]);
        assert!(a.allows_tcp("127.0.0.1:5432".parse().unwrap()));
        assert!(!a.allows_tcp("127.0.0.1:5433".parse().unwrap()));
        assert!(!a.allows_http("http", "127.0.0.1", Some(5432)));
        assert!(a.any_tcp());
        assert!(!allow(&["https://x.com"]).any_tcp());
    }

    #[test]
    fn ipv6_literals_parse_with_brackets() {
        let a = allow(&["http://[::1]:8080"]);
        assert!(a.allows_http("http", "[::1]", Some(8080)));
        assert!(!a.allows_tcp("[::1]:8080".parse().unwrap()), "an http grant is no tcp grant");
    }

    #[test]
    fn an_address_matches_its_grant_in_every_ipv6_spelling() {
        let a = allow(&["http://[0:0::1]:8080", "http://127.0.0.1", "https://[::FFFF:10.0.0.5]"]);
        for host in ["[::1]", "[0:0:0:0:0:0:0:1]", "[0::1]", "::1"] {
            assert!(a.allows_http("http", host, Some(8080)), "{host}");
        }
        for host in ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:FFFF:127.0.0.1]"] {
            assert!(a.allows_http("http", host, None), "{host} is 127.0.0.1");
        }
        assert!(a.allows_http("https", "10.0.0.5", None), "a mapped entry is its IPv4 address");
        assert!(!a.allows_http("http", "[::2]", Some(8080)));
        assert!(!a.allows_http("http", "[::ffff:127.0.0.2]", None));
        assert!(!a.allows_http("http", "[::127.0.0.1]", None), "IPv4-compatible is another address");
    }

    #[test]
    fn tcp_grants_compare_addresses() {
        let a = allow(&["tcp://10.0.0.5:5432", "tcp://[0:0::1]:6379"]);
        assert!(a.allows_tcp("[::ffff:10.0.0.5]:5432".parse().unwrap()));
        assert!(a.allows_tcp("[::1]:6379".parse().unwrap()));
        assert!(!a.allows_tcp("[::ffff:10.0.0.6]:5432".parse().unwrap()));
        assert!(!a.allows_tcp("127.0.0.1:6379".parse().unwrap()), "::1 is not 127.0.0.1");
    }

    #[test]
    fn a_destination_a_resolver_reads_as_an_address_never_matches_even_a_wildcard() {
        let a = allow(&["http://*:80", "*://*.example.com:80"]);
        let spellings = [
            "127.1",
            "2130706433",
            "0x7f000001",
            "0x7F.1",
            "0177.0.0.1",
            "127.0.0.010",
            "127.000.000.001",
            "127.0.0.1.",
            "0",
            "1.2.3.4.5",
            "www.example.123",
        ];
        for host in spellings {
            assert!(!a.allows_http("http", host, None), "{host}");
        }
        assert!(a.allows_http("http", "127.0.0.1", None), "the dotted-decimal spelling");
        assert!(a.allows_http("http", "1password.example.com", None), "a name may start with a digit");
        assert!(a.allows_http("http", "WWW.Example.COM.", None), "case and one trailing dot aside");
    }

    #[test]
    fn an_entry_in_a_spelling_only_a_resolver_reads_is_refused_naming_the_address() {
        let cases = [
            ("http://127.1", "127.0.0.1"),
            ("http://2130706433:8080", "127.0.0.1"),
            ("https://0x7f.0.0.1", "127.0.0.1"),
            ("http://127.0.0.010", "127.0.0.8"),
            ("http://0177.0.0.1", "127.0.0.1"),
            ("tcp://10.0.0.05:5432", "10.0.0.5"),
            ("tcp://167772165:5432", "10.0.0.5"),
            ("http://1.2.3.4.5", "no IPv4 address"),
            ("http://*.0.0.1", "a wildcard covers names"),
            ("https://*.example.123", "a wildcard covers names"),
            ("http://::1:8080", "in brackets"),
            ("http://[fe80::1%25eth0]", "not an IPv6 address"),
            ("http://[127.0.0.1]", "not an IPv6 address"),
            ("https://exa_mple..com", "not a host name"),
        ];
        assert_refused(&cases);
    }

    #[test]
    fn a_destination_host_reads_as_an_address_or_a_name_and_says_why_not() {
        assert_eq!(Host::parse("[0:0::1]"), Ok(Host::Address("::1".parse().unwrap())));
        assert_eq!(Host::parse("[::ffff:10.0.0.5]"), Ok(Host::Address("10.0.0.5".parse().unwrap())));
        assert_eq!(Host::parse("Api.Example.COM."), Ok(Host::Name("api.example.com".into())));
        assert_eq!(Host::parse("[::1]").unwrap().to_string(), "[::1]");
        let error = Host::parse("0x7f.1").unwrap_err();
        assert_eq!(error.host, "0x7f.1");
        assert!(error.to_string().contains("as the IPv4 address 127.0.0.1"), "{error}");
        for (host, expected) in [
            ("08.1", "no IPv4 address"),
            ("4294967296", "no IPv4 address"),
            ("256.1.1.1", "no IPv4 address"),
            ("0x", "0.0.0.0"),
            ("[::1", "closing `]`"),
            ("ex ample.com", "not a host name"),
            ("", "not a host name"),
        ] {
            let error = Host::parse(host).unwrap_err();
            assert!(error.to_string().contains(expected), "{host}: {error}");
        }
    }

    #[test]
    fn a_grant_is_the_most_specific_entry_and_says_how_it_named_the_host() {
        let a = allow(&["*://*:443", "https://*.example.com", "https://api.example.com", "https://10.0.0.5"]);
        let by = |host: &str| a.check_http("https", host, None).map(|g| (g.entry, g.by));
        assert_eq!(by("api.example.com"), Ok(("https://api.example.com", GrantedBy::Name)));
        assert_eq!(by("www.example.com"), Ok(("https://*.example.com", GrantedBy::Subdomain)));
        assert_eq!(by("elsewhere.org"), Ok(("*://*:443", GrantedBy::AnyHost)));
        let ten = "10.0.0.5".parse().unwrap();
        assert_eq!(by("[::ffff:10.0.0.5]"), Ok(("https://10.0.0.5", GrantedBy::Address(ten))));
        assert!(a.check_http("https", "10.0.0.5", None).unwrap().names_address());
        assert!(!a.check_http("https", "api.example.com", None).unwrap().names_address());
        assert_eq!(
            a.check_http("http", "api.example.com", None),
            Err(Denied::NotListed("http://api.example.com:80".into()))
        );
        assert_eq!(a.check_http("ftp", "api.example.com", None), Err(Denied::Scheme("ftp".into())));
        let refused = a.check_http("https", "2130706433", None).unwrap_err();
        assert!(matches!(refused, Denied::Host(_)), "{refused}");
        assert!(refused.to_string().contains("127.0.0.1"), "{refused}");
    }

    #[test]
    fn a_name_or_wildcard_grant_admits_no_address_of_the_machine_or_its_link() {
        let a = allow(&["https://*.example.com", "http://127.0.0.1:8080"]);
        let by_name = a.check_http("https", "api.example.com", None).unwrap();
        for local in [
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "169.254.169.254",
            "fe80::1",
        ] {
            assert!(!by_name.admits_address(local.parse().unwrap()), "{local}");
        }
        for remote in ["93.184.216.34", "10.0.0.5", "2606:2800:220:1::1", "::ffff:93.184.216.34"] {
            assert!(by_name.admits_address(remote.parse().unwrap()), "{remote}");
        }
        let by_address = a.check_http("http", "127.0.0.1", Some(8080)).unwrap();
        assert!(by_address.admits_address("127.0.0.1".parse().unwrap()));
        assert!(by_address.admits_address("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!by_address.admits_address("127.0.0.2".parse().unwrap()));
    }

    #[test]
    fn a_connect_names_host_and_port_and_any_scheme_with_them_admits_it() {
        let a = allow(&["https://api.example.com", "http://[::1]:8080", "tcp://10.0.0.5:5432"]);
        assert_eq!(a.check_connect("api.example.com:443").unwrap().by, GrantedBy::Name);
        assert_eq!(a.check_connect("API.example.com.:443").unwrap().entry, "https://api.example.com");
        assert!(a.check_connect("[0::1]:8080").unwrap().names_address());
        assert!(a.check_connect("10.0.0.5:5432").is_ok(), "a tunnel is a TCP connection");
        assert!(a.check_connect("[::ffff:10.0.0.5]:5432").is_ok());
        assert_eq!(
            a.check_connect("api.example.com:8443"),
            Err(Denied::NotListed("api.example.com:8443".into()))
        );
        assert_eq!(a.check_connect("[::1]:80"), Err(Denied::NotListed("[::1]:80".into())));
        for bad in [
            "api.example.com",
            "::1:8080",
            "[::1]",
            "api.example.com:0",
            "api.example.com:+443",
            "x:99999",
            ":443",
        ] {
            let error = a.check_connect(bad).unwrap_err();
            assert!(matches!(error, Denied::Authority(_) | Denied::Host(_)), "{bad}: {error}");
        }
        assert!(matches!(a.check_connect("167772165:5432"), Err(Denied::Host(_))));
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        let cases = [
            ("api.example.com", "expected `scheme://host[:port]`"),
            ("ftp://x.com", "unsupported scheme `ftp`"),
            ("https://x.com/path", "a path, query or fragment"),
            ("https://x.com:99999", "is not a port"),
            ("https://x.com:0", "is not a port"),
            ("tcp://db.internal:5432", "needs an IP address"),
            ("tcp://127.0.0.1", "no default port"),
            ("*://x.com", "no default port"),
            ("https://a*.com", "a wildcard host"),
            ("https://user@x.com", "a user name"),
            ("https://", "no host"),
        ];
        assert_refused(&cases);
    }
}
