//! `render_chart`: a tool whose result holds an image, for the tests of images in tool results
//! (recorded with their images, replayed with them on resume, shown by the web session page).
//!
//! It answers `chart: <title>` and the PNG `red-bar.png` beside this crate (16×12 pixels, a red
//! bar on white), whatever the title: the tests know its bytes and their digest.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use tollgate_guest::{CallError, Output, tool};

/// The chart every call returns.
const CHART: &[u8] = include_bytes!("../red-bar.png");

/// The arguments of `render_chart`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RenderChart {
    /// The chart's title, such as "refunds of order 7".
    title: String,
}

/// Renders a bar chart as a PNG image, with its title as text.
#[tool(idempotent)]
fn render_chart(args: RenderChart) -> Result<Output, CallError> {
    Ok(Output::text(format!("chart: {}", args.title)).with_image("image/png", CHART.to_vec()))
}

tollgate_guest::export_tools!(render_chart);
