//! Outbound HTTP from a tool, through `wasi:http`.
//!
//! The host lets a request through only when its scheme, host and port match the component's
//! `allowed_outbound_hosts`; anything else fails with [`HttpError::Denied`] before a connection
//! is opened. Read [`Request`] first.
//!
//! ```ignore
//! let response = tollgate_guest::http::Request::post("https://payments.example.com/refunds")
//!     .header("idempotency-key", key)
//!     .json(&body)?
//!     .send()?;
//! ```
//!
//! # Caveats
//! The client is blocking and buffers the whole body; it is meant for small API calls.

use std::fmt;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// Why a request did not produce a response.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// The URL could not be used (not `http://` or `https://`, or malformed).
    InvalidUrl(String),
    /// The host refused the request: the destination is not on the component's allow-list.
    Denied(String),
    /// The request was allowed but failed on the way (connection refused, timeout, reset).
    Transport(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::InvalidUrl(m) => write!(f, "invalid URL: {m}"),
            HttpError::Denied(m) => write!(f, "outbound request denied: {m}"),
            HttpError::Transport(m) => write!(f, "request failed: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// An HTTP request under construction.
#[derive(Clone, Debug)]
pub struct Request {
    method: &'static str,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A complete response.
#[derive(Clone, Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Request {
    /// A request with `method` (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`) to `url`.
    pub fn new(method: &'static str, url: impl Into<String>) -> Self {
        Self { method, url: url.into(), headers: Vec::new(), body: Vec::new() }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` request.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new("POST", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and its content type.
    pub fn json<T: serde::Serialize>(self, value: &T) -> Result<Self, serde_json::Error> {
        let body = serde_json::to_vec(value)?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sends the request and reads the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        let (scheme, authority, path) = split_url(&self.url)?;
        let mut fields: Vec<(String, Vec<u8>)> =
            self.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.as_bytes().to_vec())).collect();
        // A known length spares servers that refuse chunked uploads.
        if !self.body.is_empty() && !fields.iter().any(|(k, _)| k == "content-length") {
            fields.push(("content-length".into(), self.body.len().to_string().into_bytes()));
        }
        let headers = Fields::from_list(&fields)
            .map_err(|e| HttpError::InvalidUrl(format!("bad header in request: {e:?}")))?;
        let request = OutgoingRequest::new(headers);
        let method = match self.method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "HEAD" => Method::Head,
            other => Method::Other(other.to_string()),
        };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{what} rejected in {}", self.url));
        request.set_method(&method).map_err(|()| invalid("method"))?;
        request.set_scheme(Some(&scheme)).map_err(|()| invalid("scheme"))?;
        request.set_authority(Some(authority)).map_err(|()| invalid("authority"))?;
        request.set_path_with_query(Some(path)).map_err(|()| invalid("path"))?;
        let body = request.body().map_err(|()| HttpError::Transport("request body taken twice".into()))?;

        let pending = outgoing_handler::handle(request, None).map_err(|e| error(&self.url, e))?;
        // A request the host refuses closes the body stream; the response then says why, so a
        // failed write is reported only when the response does not explain it.
        let mut write_error = None;
        match body.write() {
            Ok(stream) => {
                for chunk in self.body.chunks(4096) {
                    if let Err(e) = stream.blocking_write_and_flush(chunk) {
                        write_error = Some(format!("writing the request body: {e:?}"));
                        break;
                    }
                }
            }
            Err(()) => write_error = Some("request body stream".into()),
        }
        let finished = OutgoingBody::finish(body, None);

        pending.subscribe().block();
        let response = pending
            .get()
            .ok_or_else(|| HttpError::Transport("response not ready".into()))?
            .map_err(|()| HttpError::Transport("response taken twice".into()))?
            .map_err(|e| error(&self.url, e))?;
        if let Some(message) = write_error {
            return Err(HttpError::Transport(message));
        }
        finished.map_err(|e| error(&self.url, e))?;
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response.consume().map_err(|()| HttpError::Transport("response body".into()))?;
        let stream = incoming.stream().map_err(|()| HttpError::Transport("response body stream".into()))?;
        let mut body = Vec::new();
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(e) => return Err(HttpError::Transport(format!("reading the response body: {e:?}"))),
            }
        }
        Ok(Response { status, headers, body })
    }
}

fn error(url: &str, code: ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied(format!("{url} is not on this tool's allow-list")),
        other => HttpError::Transport(format!("{url}: {other:?}")),
    }
}

/// Splits `scheme://authority/path?query`.
fn split_url(url: &str) -> Result<(Scheme, &str, &str), HttpError> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else {
        return Err(HttpError::InvalidUrl(format!("{url}: only http:// and https:// URLs are supported")));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return Err(HttpError::InvalidUrl(format!("{url}: no host")));
    }
    if path.starts_with('?') {
        return Err(HttpError::InvalidUrl(format!("{url}: write a path before the query (`/?…`)")));
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}
