//! What a request carries, checked before a handler uses it: the JSON body (its size, its
//! `Content-Type`, its syntax, its fields), the query parameters (known names only, each once,
//! each of its type and range) and the ids in the path.
//!
//! Every refusal is an [`ApiError`] that names the field, the parameter or the limit, so a
//! client never gets axum's plain-text rejections.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, Path, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use super::types::ErrorCode;
use super::{ApiError, MAX_BODY, MAX_MESSAGE_BODY};

/// The longest id accepted in a path or a query's filter, in characters (session ids are at most
/// this long).
pub(super) const MAX_ID: usize = 200;

/// A request body that is JSON by its `Content-Type` (or empty), read within `LIMIT` bytes:
/// [`MAX_BODY`], or [`MAX_MESSAGE_BODY`] for a route that takes a message's images.
pub(super) struct JsonBody<const LIMIT: usize = MAX_BODY>(pub Bytes);

impl<S: Send + Sync, const LIMIT: usize> FromRequest<S> for JsonBody<LIMIT> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
        if let Some(value) = &content_type
            && !is_json(value.to_str().unwrap_or(""))
        {
            return Err(unsupported(&String::from_utf8_lossy(value.as_bytes())));
        }
        let bytes = read_within(request.into_body(), LIMIT).await?;
        if content_type.is_none() && !bytes.is_empty() {
            return Err(unsupported("(none)"));
        }
        Ok(JsonBody(bytes))
    }
}

/// A message's body: its images make it larger.
pub(super) type MessageBody = JsonBody<MAX_MESSAGE_BODY>;

/// `application/json` or `application/<something>+json`, with any parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn unsupported(given: &str) -> ApiError {
    let given: String = given.chars().take(100).collect();
    ApiError {
        field: Some("Content-Type".to_owned()),
        ..ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            format!("the body must be JSON with `Content-Type: application/json`, not `{given}`"),
        )
    }
}

/// How much of a body over its limit is read and thrown away before the refusal goes out, and
/// for how long at most. Answering at once and closing makes the kernel reset a connection the
/// client is still writing, and the reset can overtake the answer: the client sees a broken pipe,
/// not the 413 that names the limit (HTTP's "lingering close"). Past either bound the refusal
/// goes out anyway.
const DRAIN_MAX: usize = 16 * 1024 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// The whole body, or [`too_large`] once it passes `limit` (after draining it, see
/// [`DRAIN_MAX`]).
async fn read_within(body: axum::body::Body, limit: usize) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut read = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad("body", format!("the request body could not be read: {e}")))?;
        if read.len() + chunk.len() > limit {
            let mut seen = read.len() + chunk.len();
            let _ = tokio::time::timeout(DRAIN_TIME, async {
                while seen <= DRAIN_MAX {
                    match stream.next().await {
                        Some(Ok(chunk)) => seen += chunk.len(),
                        _ => break,
                    }
                }
            })
            .await;
            return Err(too_large(limit));
        }
        read.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(read))
}

fn too_large(limit: usize) -> ApiError {
    ApiError {
        field: Some("body".to_owned()),
        ..ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::BodyTooLarge,
            format!("the request body is larger than the limit of {limit} bytes ({} KiB)", limit / 1024),
        )
    }
}

/// Parses a JSON body into `T`: a syntax error by its line and column, a wrong or missing value
/// by the field's path.
pub(super) fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad("body", "the request needs a JSON object body"));
    }
    // serde reads a struct from an array of its fields too (`[null,null]`); a body is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{')
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
    {
        let kind = match value {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::Object(_) => "an object",
        };
        return Err(ApiError::bad("body", format!("the body must be a JSON object, not {kind}")));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let inner = e.inner();
        if is_syntax(inner) {
            return syntax(inner);
        }
        // A wrong type is reported at its path; a missing or unknown field by serde's message.
        let text = inner.to_string();
        let path = e.path().to_string();
        let field = if path != "." && !path.contains('?') {
            path
        } else {
            text.split('`').nth(1).filter(|_| text.contains("field")).unwrap_or("body").to_owned()
        };
        ApiError::bad(field, format!("invalid JSON body: {text}"))
    })?;
    // Characters after the value are a syntax error too.
    deserializer.end().map_err(|e| syntax(&e))?;
    Ok(value)
}

fn is_syntax(error: &serde_json::Error) -> bool {
    matches!(error.classify(), Category::Syntax | Category::Eof | Category::Io)
}

/// A JSON syntax error by its line and column.
fn syntax(error: &serde_json::Error) -> ApiError {
    let text = error.to_string();
    let what = text.rsplit_once(" at line ").map_or(text.as_str(), |(what, _)| what);
    ApiError {
        field: Some("body".to_owned()),
        ..ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {what} at line {}, column {}", error.line(), error.column()),
        )
    }
}

/// A request's query parameters, each known to the route and given once.
#[derive(Debug)]
pub(super) struct Params(BTreeMap<String, String>);

impl Params {
    /// Parses `raw` (the query string), refusing a parameter not in `known` or given twice.
    pub(super) fn parse(raw: Option<&str>, known: &[&str]) -> Result<Params, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
            .map_err(|e| ApiError::bad("query", format!("the query string is not valid: {e}")))?;
        let mut params = BTreeMap::new();
        for (name, value) in pairs {
            if !known.contains(&name.as_str()) {
                let expected = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                return Err(ApiError::bad(
                    clip(&name),
                    format!("unknown query parameter `{}`; this route takes: {expected}", clip(&name)),
                ));
            }
            if params.contains_key(&name) {
                return Err(ApiError::bad(
                    name.clone(),
                    format!("the query parameter `{name}` is given twice"),
                ));
            }
            params.insert(name, value);
        }
        Ok(Params(params))
    }

    /// The text of `name`, when given.
    pub(super) fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// `name` as a whole number in `min..=max`, when given.
    pub(super) fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        let Some(text) = self.text(name) else { return Ok(None) };
        match text.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::bad(
                name.to_owned(),
                format!("{name} must be a whole number from {min} to {max}, not `{}`", clip(text)),
            )),
        }
    }

    /// `name` as `true` or `false`, when given.
    pub(super) fn boolean(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.text(name) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad(
                name.to_owned(),
                format!("{name} must be true or false, not `{}`", clip(other)),
            )),
        }
    }

    /// `name` as one of `allowed`, when given.
    pub(super) fn one_of(&self, name: &str, allowed: &[&str]) -> Result<Option<String>, ApiError> {
        match self.text(name) {
            None => Ok(None),
            Some(value) if allowed.contains(&value) => Ok(Some(value.to_owned())),
            Some(other) => Err(ApiError::bad(
                name.to_owned(),
                format!("{name} must be one of {}, not `{}`", allowed.join(", "), clip(other)),
            )),
        }
    }
}

/// At most 60 characters of `text`, `…` when cut: enough to recognise it in an error.
fn clip(text: &str) -> String {
    if text.chars().count() <= 60 {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(59).collect::<String>())
    }
}

/// The path's ids (`names` in order), each UTF-8 of 1 to [`MAX_ID`] characters (the document's
/// `maxLength` counts characters).
pub(super) fn path_ids<const N: usize>(
    path: Result<Path<Vec<String>>, PathRejection>,
    names: [&str; N],
) -> Result<[String; N], ApiError> {
    let Path(ids) = path.map_err(|rejection| {
        let name = match &rejection {
            PathRejection::FailedToDeserializePathParams(e) => match e.kind() {
                axum::extract::path::ErrorKind::InvalidUtf8InPathParam { key } => {
                    names.iter().find(|n| **n == key).copied().unwrap_or(names[0])
                }
                _ => names[0],
            },
            _ => names[0],
        };
        ApiError::bad(name, format!("the {name} in the path is not valid: {}", rejection.body_text()))
    })?;
    let ids: [String; N] =
        ids.try_into().map_err(|_| ApiError::bad(names[0], "the path has the wrong number of ids"))?;
    for (id, name) in ids.iter().zip(names) {
        let chars = id.chars().count();
        if chars == 0 || chars > MAX_ID {
            return Err(ApiError::bad(
                name,
                format!("the {name} in the path must be 1 to {MAX_ID} characters, not {chars}"),
            ));
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_recognised_with_their_parameters() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json(""));
    }

    #[test]
    fn unknown_repeated_and_out_of_range_parameters_are_named() {
        let error = Params::parse(Some("limit=5&bogus=1"), &["limit"]).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("bogus"));
        assert!(error.message.contains("this route takes: limit"), "{}", error.message);
        let error = Params::parse(Some("limit=5&limit=6"), &["limit"]).unwrap_err();
        assert!(error.message.contains("twice"), "{}", error.message);
        let params = Params::parse(Some("limit=-1&follow=yes"), &["limit", "follow"]).unwrap();
        let error = params.int("limit", 1, 1000).unwrap_err();
        assert_eq!(error.message, "limit must be a whole number from 1 to 1000, not `-1`");
        assert!(params.boolean("follow").is_err());
        let huge = Params::parse(Some("limit=99999999999999999999999"), &["limit"]).unwrap();
        assert_eq!(huge.int("limit", 1, 1000).unwrap_err().field.as_deref(), Some("limit"));
        let status = Params::parse(Some("status=bogus"), &["status"]).unwrap();
        let error = status.one_of("status", &["idle", "running"]).unwrap_err();
        assert_eq!(error.message, "status must be one of idle, running, not `bogus`");
    }

    #[test]
    fn a_syntax_error_is_reported_by_line_and_column() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Body {
            text: String,
        }
        let error = parse::<Body>(&Bytes::from_static(b"{\n \"text\": \"hi\",\n}")).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidJson);
        assert_eq!(error.field.as_deref(), Some("body"));
        assert!(error.message.contains("line 3, column 1"), "{}", error.message);
        let error = parse::<Body>(&Bytes::from_static(b"{\"text\": \"hi\"} trailing")).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidJson, "{}", error.message);
        let error = parse::<Body>(&Bytes::from_static(b"{\"text\": ")).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidJson, "{}", error.message);
    }
}
