//! A tool's approval summary: one sentence of what a call will do, from a template in its policy.
//!
//! `summary = "Refund {amount_cents|money:EUR} on order {order_id}"` makes an approver read
//! "Refund €1,250.00 on order 7" before any JSON. [`Summary::parse`] checks the template once, at
//! load: a placeholder is `{field}` or `{field|formatter}`, where `field` is an argument's name
//! (a dotted path reaches into an object: `{customer.email}`) and the formatter one of
//!
//! - `money:CUR`: an integer amount in the currency's minor unit (cents), shown with the
//!   currency: `money:EUR` of `125000` is `€1,250.00`, `money:JPY` of `500` is `¥500`,
//!   `money:CHF` of `990` is `CHF 9.90`. `CUR` is an ISO 4217 code (three capital letters).
//! - `date`: a Unix time in seconds (or milliseconds, above 10^11) as `2026-12-04 20:40 UTC`;
//!   an RFC 3339 text as written, its `T` a space.
//! - `list`: an array as `a, b and c` (`none` when empty).
//!
//! Without a formatter the value is shown as it is: a text without quotes, a number or boolean
//! as JSON, an object or array as compact JSON. `{{` and `}}` are literal braces.
//! [`Summary::render`] never fails: a missing argument shows as `—`, a value its formatter cannot
//! read (a text for `money`) is shown plain; the sentence is cut to [`MAX_CHARS`] characters.
//! Whether each field is one of the tool's arguments is the loader's check against the tool's
//! input schema ([`Summary::unknown_fields`]).
//!
//! The result is plain text: a page must escape it (set it as text, never as HTML).
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::summary::Summary;
//!
//! let summary = Summary::parse("create_refund", "Refund {amount_cents|money:EUR} on order {order_id}")?;
//! let text = summary.render(&json!({ "amount_cents": 125000, "order_id": "7" }));
//! assert_eq!(text, "Refund €1,250.00 on order 7");
//! # Ok::<(), tollgate_engine::summary::SummaryError>(())
//! ```

use std::fmt;

use serde_json::Value;

/// The longest rendered summary, in characters; longer ones end in `…`.
pub const MAX_CHARS: usize = 300;

/// What a missing argument shows as.
const MISSING: &str = "—";

/// A checked summary template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    source: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Field { path: Vec<String>, format: Format },
}

/// How a placeholder shows its value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Format {
    Plain,
    Money(String),
    Date,
    List,
}

/// A template [`Summary::parse`] refuses; each names the tool and the placeholder.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[policies] `{tool}.summary`: placeholder `{placeholder}`: {reason}")]
pub struct SummaryError {
    /// The tool whose policy holds the template.
    pub tool: String,
    /// The placeholder at fault, braces included (or the unbalanced brace).
    pub placeholder: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Summary {
    /// Checks `template`, the summary of `tool`'s policy.
    ///
    /// # Errors
    /// An unbalanced brace, an empty or malformed field name, an unknown formatter or a
    /// `money` without a three-letter currency: a [`SummaryError`] naming the placeholder.
    pub fn parse(tool: &str, template: &str) -> Result<Self, SummaryError> {
        let bad = |placeholder: &str, reason: &str| SummaryError {
            tool: tool.to_owned(),
            placeholder: placeholder.to_owned(),
            reason: reason.to_owned(),
        };
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = template;
        while let Some(at) = rest.find(['{', '}']) {
            text.push_str(&rest[..at]);
            let tail = &rest[at..];
            if tail.starts_with("{{") || tail.starts_with("}}") {
                text.push_str(&tail[..1]);
                rest = &tail[2..];
                continue;
            }
            if tail.starts_with('}') {
                return Err(bad("}", "a `}` without its `{` (write `}}` for a literal brace)"));
            }
            let Some(end) = tail.find('}') else {
                return Err(bad(tail, "a `{` without its `}` (write `{{` for a literal brace)"));
            };
            let placeholder = &tail[..=end];
            let inner = &tail[1..end];
            if inner.contains('{') {
                return Err(bad(placeholder, "a `{` inside a placeholder"));
            }
            let (field, formatter) = match inner.split_once('|') {
                Some((field, formatter)) => (field.trim(), Some(formatter.trim())),
                None => (inner.trim(), None),
            };
            let path: Vec<String> = field.split('.').map(str::to_owned).collect();
            if path.iter().any(|segment| segment.is_empty() || segment.contains(char::is_whitespace)) {
                return Err(bad(placeholder, "expected an argument's name, e.g. `{order_id}`"));
            }
            let format = match formatter {
                None => Format::Plain,
                Some("date") => Format::Date,
                Some("list") => Format::List,
                Some(money) if money == "money" || money.starts_with("money:") => {
                    let currency = money.strip_prefix("money:").unwrap_or_default();
                    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
                        return Err(bad(
                            placeholder,
                            "`money` needs a currency code of three capital letters, e.g. `money:EUR`",
                        ));
                    }
                    Format::Money(currency.to_owned())
                }
                Some(other) => {
                    return Err(bad(
                        placeholder,
                        &format!("unknown formatter `{other}`; expected `money:CUR`, `date` or `list`"),
                    ));
                }
            };
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Field { path, format });
            rest = &tail[end + 1..];
        }
        text.push_str(rest);
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Summary { source: template.to_owned(), parts })
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The fields whose first name is not a property of `input_schema` (a JSON Schema object),
    /// each as written (`customer.email`). Empty when the schema lists no `properties` (nothing
    /// to check against).
    pub fn unknown_fields(&self, input_schema: &Value) -> Vec<String> {
        let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
            return Vec::new();
        };
        self.parts
            .iter()
            .filter_map(|part| match part {
                Part::Field { path, .. } if !properties.contains_key(&path[0]) => Some(path.join(".")),
                _ => None,
            })
            .collect()
    }

    /// The sentence for a call with `arguments`.
    pub fn render(&self, arguments: &Value) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Field { path, format } => {
                    let value = path.iter().try_fold(arguments, |value, name| value.get(name.as_str()));
                    match value {
                        None | Some(Value::Null) => out.push_str(MISSING),
                        Some(value) => format.write(value, &mut out),
                    }
                }
            }
        }
        if out.chars().count() > MAX_CHARS {
            out = out.chars().take(MAX_CHARS - 1).collect();
            out.push('…');
        }
        out
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Format {
    fn write(&self, value: &Value, out: &mut String) {
        let done = match self {
            Format::Plain => false,
            Format::Money(currency) => {
                value.as_i64().map(|minor| out.push_str(&money(minor, currency))).is_some()
            }
            Format::Date => date(value).map(|date| out.push_str(&date)).is_some(),
            Format::List => match value {
                Value::Array(items) => {
                    out.push_str(&list(items));
                    true
                }
                _ => false,
            },
        };
        if !done {
            out.push_str(&plain(value));
        }
    }
}

/// A value as it is: a text without quotes, anything else as compact JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `items` as `a, b and c`.
fn list(items: &[Value]) -> String {
    let items: Vec<String> = items.iter().map(plain).collect();
    match items.as_slice() {
        [] => "none".to_owned(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// ISO 4217 currencies without a minor unit (the common ones).
const ZERO_DECIMAL: [&str; 8] = ["JPY", "KRW", "VND", "CLP", "ISK", "PYG", "UGX", "XOF"];

/// `minor` units of `currency`: `€1,250.00`, `CHF 9.90`, `-$5.00`.
fn money(minor: i64, currency: &str) -> String {
    let decimals = if ZERO_DECIMAL.contains(&currency) { 0 } else { 2 };
    let scale = 10u64.pow(decimals);
    let abs = minor.unsigned_abs();
    let (units, fraction) = (abs / scale, abs % scale);
    let digits = units.to_string();
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if decimals > 0 {
        grouped.push_str(&format!(".{fraction:0width$}", width = decimals as usize));
    }
    let sign = if minor < 0 { "-" } else { "" };
    match currency {
        "EUR" => format!("{sign}€{grouped}"),
        "USD" => format!("{sign}${grouped}"),
        "GBP" => format!("{sign}£{grouped}"),
        "JPY" => format!("{sign}¥{grouped}"),
        other => format!("{sign}{other} {grouped}"),
    }
}

/// A Unix time (seconds, or milliseconds above 10^11) as `YYYY-MM-DD HH:MM UTC`; an RFC 3339 text
/// with its `T` a space. `None` for anything else.
fn date(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => {
            let mut secs = n.as_i64()?;
            if secs.abs() > 100_000_000_000 {
                secs = secs.div_euclid(1000);
            }
            let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            let (y, m, d) = civil_from_days(days);
            Some(format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", of_day / 3600, of_day % 3600 / 60))
        }
        Value::String(text) => {
            let b = text.as_bytes();
            let dated = b.len() >= 10
                && b[..10]
                    .iter()
                    .enumerate()
                    .all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() });
            dated.then(|| text.replacen('T', " ", 1))
        }
        _ => None,
    }
}

/// The proleptic Gregorian date (year, month, day) of `days` since 1970-01-01 (Howard Hinnant's
/// algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, arguments: Value) -> String {
        Summary::parse("t", template).unwrap().render(&arguments)
    }

    #[test]
    fn money_groups_thousands_and_shows_the_currency() {
        let args = json!({ "a": 125000, "b": -500, "c": 990, "d": 5, "e": 1234567 });
        assert_eq!(render("{a|money:EUR}", args.clone()), "€1,250.00");
        assert_eq!(render("{b|money:USD}", args.clone()), "-$5.00");
        assert_eq!(render("{c|money:CHF}", args.clone()), "CHF 9.90");
        assert_eq!(render("{d|money:GBP}", args.clone()), "£0.05");
        assert_eq!(render("{e|money:JPY}", args), "¥1,234,567");
    }

    #[test]
    fn dates_lists_and_plain_values() {
        let args = json!({
            "at": 1_796_416_835, "ms": 1_796_416_835_000_i64, "iso": "2026-12-04T20:40:35Z",
            "ids": ["a", 2, "c"], "one": ["x"], "none": [], "n": 7, "s": "order 7", "o": { "k": 1 },
        });
        assert_eq!(render("{at|date}", args.clone()), "2026-12-04 20:40 UTC");
        assert_eq!(render("{ms|date}", args.clone()), "2026-12-04 20:40 UTC");
        assert_eq!(render("{iso|date}", args.clone()), "2026-12-04 20:40:35Z");
        assert_eq!(render("{ids|list}; {one|list}; {none|list}", args.clone()), "a, 2 and c; x; none");
        assert_eq!(render("{n} {s} {o} {o.k}", args), r#"7 order 7 {"k":1} 1"#);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn a_missing_or_unreadable_value_never_fails_the_render() {
        let args = json!({ "text": "lots", "nil": null });
        assert_eq!(
            render("{absent} {nil} {text|money:EUR} {text|date} {text|list}", args),
            "— — lots lots lots"
        );
        let long = "x".repeat(400);
        let out = render("{s}", json!({ "s": long }));
        assert_eq!(out.chars().count(), MAX_CHARS);
        assert!(out.ends_with('…'));
    }

    #[test]
    fn braces_escape_and_markup_stays_text() {
        assert_eq!(render("{{literal}} {x}", json!({ "x": "<b>&</b>" })), "{literal} <b>&</b>");
    }

    #[test]
    fn a_bad_template_names_the_tool_and_the_placeholder() {
        let cases = [
            ("{amount|money}", "{amount|money}", "three capital letters"),
            ("{amount|money:eur}", "{amount|money:eur}", "three capital letters"),
            ("{when|weekday}", "{when|weekday}", "unknown formatter `weekday`"),
            ("Refund {}", "{}", "argument's name"),
            ("{a..b}", "{a..b}", "argument's name"),
            ("open {order_id", "{order_id", "without its `}`"),
            ("close }", "}", "without its `{`"),
        ];
        for (template, placeholder, reason) in cases {
            let err = Summary::parse("create_refund", template).unwrap_err();
            assert_eq!(err.placeholder, placeholder, "{template}");
            let text = err.to_string();
            assert!(text.contains("`create_refund.summary`") && text.contains(reason), "{text}");
        }
    }

    #[test]
    fn unknown_fields_are_checked_against_the_schema_properties() {
        let summary =
            Summary::parse("t", "{order_id} {amount_cents|money:EUR} {customer.email} {nope}").unwrap();
        let schema =
            json!({ "type": "object", "properties": { "order_id": {}, "amount_cents": {}, "customer": {} } });
        assert_eq!(summary.unknown_fields(&schema), vec!["nope".to_owned()]);
        assert!(summary.unknown_fields(&json!({ "type": "object" })).is_empty());
        assert_eq!(summary.to_string(), "{order_id} {amount_cents|money:EUR} {customer.email} {nope}");
    }
}
