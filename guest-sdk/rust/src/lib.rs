//! Write Tollgate tools in Rust.
//!
//! A tool is a plain function with typed arguments. [`macro@tool`] derives its spec (name,
//! description, annotations) and the JSON Schema of its arguments; [`export_tools!`] exports the
//! `tollgate:tool/tools@0.1.0` interface from the component. Build with
//! `cargo build --target wasm32-wasip2 --release` and drop the `.wasm` into the agent's `tools/`.
//!
//! ```ignore
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use tollgate_guest::{tool, CallError, Context, Output};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct LookupArgs {
//!     /// The order's ID.
//!     order_id: String,
//! }
//!
//! /// Looks an order up by its ID.
//! #[tool(read_only)]
//! fn lookup_order(args: LookupArgs) -> Result<Output, CallError> {
//!     Ok(Output::text(format!("order {} is on its way", args.order_id)))
//! }
//!
//! /// Refunds an order. Runs once, in its own durable step, after approval.
//! #[tool(open_world)]
//! fn create_refund(args: LookupArgs, cx: &Context) -> Result<Output, CallError> {
//!     let key = cx.idempotency_key().ok_or(CallError::failed("must run deferred"))?;
//!     Ok(Output::text(format!("refunded {} under key {key}", args.order_id)))
//! }
//!
//! tollgate_guest::export_tools!(lookup_order, create_refund);
//! ```
//!
//! What a handler may return: [`Output`], `String`, `&'static str`, or a `Result` of one of those
//! with an error that converts into [`CallError`] (any `std::error::Error` does, as `retryable`:
//! see [`CallError`]).
//!
//! Host services: [`config::get`] reads a key the component's manifest grants, [`log`] writes to
//! the host's log, and (feature `http`, on by default) [`http`] sends requests through `wasi:http`
//! to the hosts the manifest allows.
//!
//! # Caveats
//! - Each call runs in a fresh instance: statics do not survive from one call to the next.
//! - The host validates arguments against the schema before the handler runs, so a
//!   deserialization error here means the schema and the type disagree (a bug in the tool).
//! - A panic traps the instance; the host treats it as a failure that may have taken effect (an
//!   idempotent write is attempted again, a single-attempt write is recorded `outcome_unknown`),
//!   with the panic message.

#![forbid(unsafe_code)]

#[cfg(feature = "http")]
pub mod http;

#[doc(hidden)]
pub mod wit {
    wit_bindgen::generate!({
        path: "wit",
        world: "tollgate:tool/tool-provider@0.1.0",
        pub_export_macro: true,
        export_macro_name: "__export_tool_provider",
        default_bindings_module: "::tollgate_guest::wit",
    });
}

pub use tollgate_guest_macro::tool;

use std::fmt;

use wit::tollgate::tool::types as w;

/// Hints that classify a tool when no policy of the agent names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// The tool changes nothing: it may run inline, inside the model's segment.
    pub read_only: bool,
    /// A repeated call with the same idempotency key has the effect of one.
    pub idempotent: bool,
    /// It may delete or overwrite data.
    pub destructive: bool,
    /// It reaches systems outside the host.
    pub open_world: bool,
}

/// One tool, as [`macro@tool`] generates it and [`export_tools!`] lists it.
#[derive(Clone, Copy)]
pub struct ToolDef {
    /// The tool's name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// Its annotations.
    pub annotations: Annotations,
    /// Produces the JSON Schema of its arguments.
    pub input_schema: fn() -> String,
    /// Runs it.
    pub handler: fn(&str, &Context) -> Result<Output, CallError>,
}

impl fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDef").field("name", &self.name).field("annotations", &self.annotations).finish()
    }
}

/// The durable step a deferred call runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Execution {
    /// The session.
    pub session_id: String,
    /// The turn within the session.
    pub turn_id: String,
    /// The model's tool-use ID.
    pub tool_call_id: String,
    /// 1 on the first attempt.
    pub attempt: u32,
    /// The same on every attempt of this call: send it to the remote system.
    pub idempotency_key: String,
}

/// What a handler knows about the call besides its arguments.
#[derive(Clone, Debug, Default)]
pub struct Context {
    execution: Option<Execution>,
}

impl Context {
    /// A context for a call with this execution (for unit tests of handlers).
    pub fn new(execution: Option<Execution>) -> Self {
        Self { execution }
    }

    /// The durable step, when the call was deferred out of the model's segment; `None` for an
    /// inline read.
    pub fn execution(&self) -> Option<&Execution> {
        self.execution.as_ref()
    }

    /// The attempt number: 1 for an inline call.
    pub fn attempt(&self) -> u32 {
        self.execution.as_ref().map_or(1, |e| e.attempt)
    }

    /// The idempotency key of a deferred call.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.execution.as_ref().map(|e| e.idempotency_key.as_str())
    }
}

/// One block of output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Text the model reads.
    Text(String),
    /// An image the model sees.
    Image {
        /// Such as `image/png`.
        media_type: String,
        /// The encoded bytes.
        data: Vec<u8>,
    },
}

/// What a call produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// The blocks, in order.
    pub content: Vec<Content>,
    /// A tool-level failure the model should read; recorded `failed` and not retried.
    pub is_error: bool,
}

impl Output {
    /// One text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self { content: vec![Content::Text(text.into())], is_error: false }
    }

    /// One text block holding `value` as compact JSON.
    pub fn json<T: serde::Serialize>(value: &T) -> Result<Self, CallError> {
        Ok(Self::text(serde_json::to_string(value)?))
    }

    /// A tool-level failure with this text: the model reads it, the call is not retried.
    pub fn error(text: impl Into<String>) -> Self {
        Self { content: vec![Content::Text(text.into())], is_error: true }
    }

    /// Appends an image block.
    pub fn with_image(mut self, media_type: impl Into<String>, data: Vec<u8>) -> Self {
        self.content.push(Content::Image { media_type: media_type.into(), data });
        self
    }
}

impl From<String> for Output {
    fn from(text: String) -> Self {
        Output::text(text)
    }
}

impl From<&'static str> for Output {
    fn from(text: &'static str) -> Self {
        Output::text(text)
    }
}

/// The handler failed and produced no output for the model.
///
/// Any `std::error::Error` converts into [`CallError::Retryable`], so `?` works in handlers: an
/// error the handler passes up may come after its write took effect (a refund sent, then an answer
/// it cannot parse), so the host attempts an idempotent write again under the same key and
/// records a single-attempt write `outcome_unknown`, never `failed`. Only [`Output::error`] is a
/// definite failure the model reads; return [`CallError::failed`] for a permanent failure you
/// know took no effect (or an idempotent write may simply stop).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Permanent: a deferred idempotent write records `failed`; a single-attempt write records
    /// `outcome_unknown`.
    Failed(String),
    /// Transient: a deferred idempotent write is attempted again with the same key.
    Retryable(String),
}

impl CallError {
    /// A permanent failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// A transient failure.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::Retryable(message.into())
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Failed(m) => write!(f, "failed: {m}"),
            CallError::Retryable(m) => write!(f, "retryable: {m}"),
        }
    }
}

impl<E: std::error::Error> From<E> for CallError {
    fn from(error: E) -> Self {
        CallError::Retryable(error.to_string())
    }
}

/// The arguments of a tool that takes none: an empty object.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

/// Values the component's manifest grants.
pub mod config {
    /// The value of `key`, when the manifest grants the key and a value is set.
    pub fn get(key: &str) -> Option<String> {
        crate::wit::tollgate::tool::config::get(key)
    }
}

/// Messages into the host's log, tagged with the component.
pub mod log {
    use crate::wit::tollgate::tool::log::{Level, emit};

    /// Fine-grained detail.
    pub fn trace(message: impl AsRef<str>) {
        emit(Level::Trace, message.as_ref());
    }
    /// Diagnostics for the tool's author.
    pub fn debug(message: impl AsRef<str>) {
        emit(Level::Debug, message.as_ref());
    }
    /// Normal events.
    pub fn info(message: impl AsRef<str>) {
        emit(Level::Info, message.as_ref());
    }
    /// Something unexpected that the tool handled.
    pub fn warn(message: impl AsRef<str>) {
        emit(Level::Warn, message.as_ref());
    }
    /// A failure.
    pub fn error(message: impl AsRef<str>) {
        emit(Level::Error, message.as_ref());
    }
}

/// Exports the `tollgate:tool/tools` interface listing these [`macro@tool`] functions.
///
/// Use it once per component: `tollgate_guest::export_tools!(lookup_order, create_refund);`
/// A tool in another module is named by its path: `export_tools!(orders::lookup_order)`.
#[macro_export]
macro_rules! export_tools {
    ($($($segment:ident)::+),+ $(,)?) => {
        const _: () = {
            struct __TollgateTools;
            const __TOLLGATE_TOOLS: &[$crate::ToolDef] = &[$($($segment)::+::TOOL),+];
            impl $crate::wit::exports::tollgate::tool::tools::Guest for __TollgateTools {
                fn list_tools() -> ::std::vec::Vec<$crate::wit::tollgate::tool::types::ToolSpec> {
                    $crate::__private::list_tools(__TOLLGATE_TOOLS)
                }
                fn call(
                    name: ::std::string::String,
                    arguments: ::std::string::String,
                    execution: ::core::option::Option<$crate::wit::tollgate::tool::types::DeferredExecution>,
                ) -> ::core::result::Result<
                    $crate::wit::tollgate::tool::types::ToolOutput,
                    $crate::wit::tollgate::tool::types::CallError,
                > {
                    $crate::__private::call(__TOLLGATE_TOOLS, &name, &arguments, execution)
                }
            }
            $crate::wit::__export_tool_provider!(__TollgateTools);
        };
    };
}

/// What the generated code calls. Not a public API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    /// Turns a handler's return value into the call's result.
    pub trait IntoCallResult {
        /// The conversion.
        fn into_call_result(self) -> Result<Output, CallError>;
    }

    impl IntoCallResult for Output {
        fn into_call_result(self) -> Result<Output, CallError> {
            Ok(self)
        }
    }

    impl IntoCallResult for String {
        fn into_call_result(self) -> Result<Output, CallError> {
            Ok(Output::text(self))
        }
    }

    impl IntoCallResult for &'static str {
        fn into_call_result(self) -> Result<Output, CallError> {
            Ok(Output::text(self))
        }
    }

    impl<O: Into<Output>, E: Into<CallError>> IntoCallResult for Result<O, E> {
        fn into_call_result(self) -> Result<Output, CallError> {
            self.map(Into::into).map_err(Into::into)
        }
    }

    /// The JSON Schema of `T`, as JSON text.
    pub fn schema_of<T: schemars::JsonSchema>() -> String {
        schemars::schema_for!(T).as_value().to_string()
    }

    /// Decodes a call's arguments.
    pub fn parse_arguments<T: serde::de::DeserializeOwned>(
        tool: &str,
        arguments: &str,
    ) -> Result<T, CallError> {
        serde_json::from_str(arguments)
            .map_err(|e| CallError::Failed(format!("the arguments of `{tool}` do not match its type: {e}")))
    }

    pub fn list_tools(tools: &[ToolDef]) -> Vec<w::ToolSpec> {
        tools
            .iter()
            .map(|t| w::ToolSpec {
                name: t.name.to_string(),
                description: t.description.to_string(),
                input_schema: (t.input_schema)(),
                annotations: w::Annotations {
                    read_only: t.annotations.read_only,
                    idempotent: t.annotations.idempotent,
                    destructive: t.annotations.destructive,
                    open_world: t.annotations.open_world,
                },
            })
            .collect()
    }

    pub fn call(
        tools: &[ToolDef],
        name: &str,
        arguments: &str,
        execution: Option<w::DeferredExecution>,
    ) -> Result<w::ToolOutput, w::CallError> {
        let Some(tool) = tools.iter().find(|t| t.name == name) else {
            return Err(w::CallError::Failed(format!("this component has no tool named `{name}`")));
        };
        let cx = Context {
            execution: execution.map(|e| Execution {
                session_id: e.session_id,
                turn_id: e.turn_id,
                tool_call_id: e.tool_call_id,
                attempt: e.attempt,
                idempotency_key: e.idempotency_key,
            }),
        };
        match (tool.handler)(arguments, &cx) {
            Ok(output) => Ok(w::ToolOutput {
                content: output
                    .content
                    .into_iter()
                    .map(|c| match c {
                        Content::Text(t) => w::Content::Text(t),
                        Content::Image { media_type, data } => {
                            w::Content::Image(w::Image { media_type, data })
                        }
                    })
                    .collect(),
                is_error: output.is_error,
            }),
            Err(CallError::Failed(m)) => Err(w::CallError::Failed(m)),
            Err(CallError::Retryable(m)) => Err(w::CallError::Retryable(m)),
        }
    }
}
