//! The outbound allow-list of a component, in Spin's `allowed_outbound_hosts` syntax. Pure.
//!
//! Each entry is `scheme://host[:port]`:
//!
//! | entry | allows |
//! | --- | --- |
//! | `https://api.example.com` | HTTPS to that host on port 443 |
//! | `https://*.example.com:8443` | HTTPS to any subdomain (not the apex) on port 8443 |
//! | `http://127.0.0.1:*` | plain HTTP to 127.0.0.1 on any port |
//! | `*://example.com:8080` | any scheme to that host and port |
//! | `tcp://10.0.0.5:5432` | a raw TCP connection (`wasi:sockets`) to that IP address and port |
//!
//! A port left out means the scheme's default (80 for `http`, 443 for `https`); `*` as the scheme
//! needs an explicit port. Paths, queries, user names and `tcp://` host names are refused: name
//! lookup is not available to tools, so a TCP grant names an IP address.
//!
//! Read [`AllowedHosts`] first. The enforcement is elsewhere: the `wasi:http` hook and the
//! `wasi:sockets` address check in `state.rs` ask [`AllowedHosts::allows_http`] and
//! [`AllowedHosts::allows_tcp`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Why an allow-list entry was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("allowed_outbound_hosts entry `{entry}`: {reason}")]
pub struct AllowListError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
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
    Exact(String),
    /// `*.example.com` stored as `.example.com`.
    Subdomain(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PortMatch {
    Any,
    Exact(u16),
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

    /// Whether an HTTP request with this scheme (`http` or `https`), host and port (`None`: the
    /// scheme's default) may go out.
    pub fn allows_http(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        let scheme = scheme.to_ascii_lowercase();
        let (wanted, default_port) = match scheme.as_str() {
            "http" => (SchemeMatch::Http, 80),
            "https" => (SchemeMatch::Https, 443),
            _ => return false,
        };
        let host = normalize_host(host);
        let port = port.unwrap_or(default_port);
        self.entries.iter().any(|e| {
            (e.scheme == wanted || e.scheme == SchemeMatch::Any)
                && host_matches(&e.host, &host)
                && port_matches(&e.port, port)
        })
    }

    /// Whether a raw TCP connection to `addr` may be opened.
    pub fn allows_tcp(&self, addr: SocketAddr) -> bool {
        let host = addr.ip().to_string();
        self.entries.iter().any(|e| {
            (e.scheme == SchemeMatch::Tcp || e.scheme == SchemeMatch::Any)
                && host_matches(&e.host, &host)
                && port_matches(&e.port, addr.port())
        })
    }

    /// Whether any entry could allow a TCP connection (so sockets need linking at all).
    pub fn any_tcp(&self) -> bool {
        self.entries.iter().any(|e| matches!(e.scheme, SchemeMatch::Tcp | SchemeMatch::Any))
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

fn normalize_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn host_matches(pattern: &HostMatch, host: &str) -> bool {
    match pattern {
        HostMatch::Any => true,
        HostMatch::Exact(h) => h == host,
        HostMatch::Subdomain(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
    }
}

fn port_matches(pattern: &PortMatch, port: u16) -> bool {
    match pattern {
        PortMatch::Any => true,
        PortMatch::Exact(p) => *p == port,
    }
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
    let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
        let Some((ip, after)) = inner.split_once(']') else {
            return Err(fail("an IPv6 address needs a closing `]`"));
        };
        match after {
            "" => (ip, None),
            p if p.starts_with(':') => (ip, Some(&p[1..])),
            _ => return Err(fail("unexpected text after the IPv6 address")),
        }
    } else {
        match rest.rsplit_once(':') {
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
    let host = normalize_host(host);
    let host = if host == "*" {
        HostMatch::Any
    } else if let Some(suffix) = host.strip_prefix("*.") {
        if suffix.is_empty() || suffix.contains('*') {
            return Err(fail("a wildcard host is `*` or `*.domain`"));
        }
        HostMatch::Subdomain(format!(".{suffix}"))
    } else if host.contains('*') {
        return Err(fail("a wildcard host is `*` or `*.domain`"));
    } else {
        if !host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':')) {
            return Err(fail(&format!("`{host}` is not a host name or IP address")));
        }
        HostMatch::Exact(host)
    };
    if scheme == SchemeMatch::Tcp {
        if let HostMatch::Exact(h) = &host
            && h.parse::<IpAddr>().is_err()
        {
            return Err(fail("a tcp:// grant needs an IP address: tools cannot look names up"));
        }
        if !matches!(host, HostMatch::Exact(_)) {
            return Err(fail("a tcp:// grant needs an exact IP address"));
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
        for (entry, expected) in cases {
            let error = AllowedHosts::parse(&[entry]).unwrap_err();
            assert_eq!(error.entry, entry);
            assert!(error.to_string().contains(expected), "{entry}: {error}");
        }
    }
}
