//! What a model request cost: the token counts of one response priced by its model.
//!
//! A small, fixed table of list prices in USD per million tokens, matched on the model name
//! (first match wins; a dated or suffixed name such as `claude-sonnet-4-5-20250929` matches its
//! family). Cache writes cost 1.25 × the input price and cache reads 0.1 × (the 5-minute cache's
//! list prices). A model the table does not know is priced as the dearest entry, so a spend limit
//! errs on the side of stopping early. The CLI's own `total_cost_usd` uses its own table; the
//! Worker's spend accounting uses this one, for every request it forwards.
//!
//! | model name contains | input | output |
//! | --- | --- | --- |
//! | `claude-3-haiku` | 0.25 | 1.25 |
//! | `haiku-3-5`, `3-5-haiku` | 0.80 | 4 |
//! | `haiku` | 1 | 5 |
//! | `sonnet` | 3 | 15 |
//! | `claude-3-opus`, `opus-4-1`, `opus-4-0`, `opus-4-2025`, `opus-4@` or ends in `opus-4` | 15 | 75 |
//! | `opus` | 5 | 25 |
//! | anything else | 15 | 75 |

use tollgate_process::metrics::TokenCounts;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Input.
    pub input: f64,
    /// Output.
    pub output: f64,
}

const LEGACY_OPUS: Price = Price { input: 15.0, output: 75.0 };
/// The price of a model the table does not know: the dearest entry.
pub const UNKNOWN: Price = LEGACY_OPUS;

/// The list price of `model`. See the module docs for the table.
pub fn price(model: &str) -> Price {
    let m = model.to_ascii_lowercase();
    let has = |part: &str| m.contains(part);
    if has("claude-3-haiku") {
        Price { input: 0.25, output: 1.25 }
    } else if has("haiku-3-5") || has("3-5-haiku") {
        Price { input: 0.80, output: 4.0 }
    } else if has("haiku") {
        Price { input: 1.0, output: 5.0 }
    } else if has("sonnet") {
        Price { input: 3.0, output: 15.0 }
    } else if has("claude-3-opus")
        || has("opus-4-1")
        || has("opus-4-0")
        || has("opus-4-2025")
        || has("opus-4@")
        || m.ends_with("opus-4")
    {
        LEGACY_OPUS
    } else if has("opus") {
        Price { input: 5.0, output: 25.0 }
    } else {
        UNKNOWN
    }
}

/// What `tokens` of `model` cost, in USD.
pub fn cost_usd(model: &str, tokens: &TokenCounts) -> f64 {
    let p = price(model);
    let per = |n: u64| n as f64 / 1_000_000.0;
    per(tokens.input) * p.input
        + per(tokens.cache_creation) * p.input * 1.25
        + per(tokens.cache_read) * p.input * 0.1
        + per(tokens.output) * p.output
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_dated_names_find_their_prices_and_an_unknown_model_is_the_dearest() {
        assert_eq!(price("claude-sonnet-4-5-20250929"), Price { input: 3.0, output: 15.0 });
        assert_eq!(price("claude-haiku-4-5"), Price { input: 1.0, output: 5.0 });
        assert_eq!(price("claude-3-5-haiku-20241022"), Price { input: 0.80, output: 4.0 });
        assert_eq!(price("claude-3-haiku-20240307"), Price { input: 0.25, output: 1.25 });
        assert_eq!(price("claude-opus-4-5"), Price { input: 5.0, output: 25.0 });
        assert_eq!(price("claude-opus-4-1-20250805"), LEGACY_OPUS);
        assert_eq!(price("claude-opus-4-20250514"), LEGACY_OPUS);
        assert_eq!(price("claude-opus-4"), LEGACY_OPUS);
        assert_eq!(price("CLAUDE-SONNET-4"), Price { input: 3.0, output: 15.0 });
        assert_eq!(price("gpt-9"), UNKNOWN);
    }

    #[test]
    fn cache_writes_cost_more_and_cache_reads_less_than_input() {
        let tokens = TokenCounts {
            input: 1_000_000,
            output: 1_000_000,
            cache_creation: 1_000_000,
            cache_read: 1_000_000,
        };
        let cost = cost_usd("claude-sonnet-4-5", &tokens);
        assert!((cost - (3.0 + 15.0 + 3.75 + 0.3)).abs() < 1e-9, "{cost}");
        assert_eq!(tokens.all_input(), 3_000_000);
    }
}
