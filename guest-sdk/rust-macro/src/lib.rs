//! The `#[tool]` attribute of [`tollgate-guest`](https://docs.rs/tollgate-guest).
//!
//! This crate owns only the code generation; the types it refers to (`ToolDef`, `Context`,
//! `IntoCallResult`, …) live in `tollgate-guest`, which re-exports the attribute. Read
//! [`macro@tool`] first.
//!
//! For a function
//!
//! ```ignore
//! /// Looks an order up.
//! #[tool(read_only)]
//! fn lookup_order(args: LookupArgs, cx: &Context) -> Result<Output, CallError> { /* … */ }
//! ```
//!
//! it keeps the function as written and adds a module of the same name (functions and modules
//! live in different namespaces) holding `pub const TOOL: ToolDef`, which `export_tools!` lists.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, FnArg, Ident, ItemFn, Lit, LitStr, Meta, Token, Type};

/// Marks a function as a Tollgate tool.
///
/// The function takes zero, one or two parameters: the arguments (any type that implements
/// `serde::Deserialize` and `schemars::JsonSchema`; its schema becomes the tool's input schema),
/// then optionally `&Context` (the deferred-execution context: attempt, idempotency key). It
/// returns anything that implements `IntoCallResult`: `Output`, `String`, or a `Result` of either
/// with an error convertible into `CallError`.
///
/// Options, all optional, comma-separated:
/// - `name = "…"`: the tool's name (default: the function's name);
/// - `description = "…"`: for the model (default: the function's doc comment);
/// - `read_only`, `idempotent`, `destructive`, `open_world`: the annotations (default: all off).
///
/// Errors at compile time (each one a case of `tests/fail`): an item that is not a function, a
/// missing description, an unknown option or one not a string where a string belongs, more than
/// two parameters, a second parameter other than `&Context`, a `self` parameter, or an `async`
/// function.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = syn::parse_macro_input!(attr as ToolOptions);
    let function = syn::parse_macro_input!(item as ItemFn);
    match expand(options, function) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

#[derive(Default)]
struct ToolOptions {
    name: Option<LitStr>,
    description: Option<LitStr>,
    read_only: bool,
    idempotent: bool,
    destructive: bool,
    open_world: bool,
}

impl Parse for ToolOptions {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut options = ToolOptions::default();
        for meta in Punctuated::<Meta, Token![,]>::parse_terminated(input)? {
            let Some(key) = meta.path().get_ident().map(Ident::to_string) else {
                return Err(syn::Error::new_spanned(meta.path(), "expected an option name"));
            };
            match (key.as_str(), &meta) {
                ("name", Meta::NameValue(nv)) => options.name = Some(string_value(&nv.value)?),
                ("description", Meta::NameValue(nv)) => options.description = Some(string_value(&nv.value)?),
                ("read_only", Meta::Path(_)) => options.read_only = true,
                ("idempotent", Meta::Path(_)) => options.idempotent = true,
                ("destructive", Meta::Path(_)) => options.destructive = true,
                ("open_world", Meta::Path(_)) => options.open_world = true,
                _ => {
                    return Err(syn::Error::new_spanned(
                        &meta,
                        format!(
                            "unknown #[tool] option `{key}`: expected `name = \"…\"`, \
                             `description = \"…\"`, `read_only`, `idempotent`, `destructive` or `open_world`"
                        ),
                    ));
                }
            }
        }
        Ok(options)
    }
}

fn string_value(expr: &Expr) -> syn::Result<LitStr> {
    match expr {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(other, "expected a string literal")),
    }
}

/// The doc comment of `function`, lines joined with newlines and trimmed.
fn doc_comment(function: &ItemFn) -> Option<String> {
    let lines: Vec<String> = function
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => string_value(&nv.value).ok().map(|s| s.value()),
            _ => None,
        })
        .map(|line| line.strip_prefix(' ').unwrap_or(&line).trim_end().to_string())
        .collect();
    let text = lines.join("\n").trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn expand(options: ToolOptions, function: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &function.sig;
    if let Some(asyncness) = &sig.asyncness {
        return Err(syn::Error::new_spanned(asyncness, "a #[tool] function cannot be async"));
    }
    let fn_name = &sig.ident;
    let name = options.name.map(|s| s.value()).unwrap_or_else(|| fn_name.to_string());
    let description = match options.description.map(|s| s.value()).or_else(|| doc_comment(&function)) {
        Some(d) => d,
        None => {
            return Err(syn::Error::new_spanned(
                fn_name,
                "a #[tool] needs a description: write a doc comment or `description = \"…\"`",
            ));
        }
    };

    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new_spanned(r, "a #[tool] function cannot take `self`"));
            }
            FnArg::Typed(t) => params.push((*t.ty).clone()),
        }
    }
    let krate = quote!(::tollgate_guest);
    let (args_type, call): (proc_macro2::TokenStream, proc_macro2::TokenStream) = match params.as_slice() {
        [] => (
            quote!(#krate::NoArguments),
            quote!(#krate::__private::IntoCallResult::into_call_result(super::#fn_name())),
        ),
        [args] => (
            quote!(#args),
            quote!(#krate::__private::IntoCallResult::into_call_result(super::#fn_name(args))),
        ),
        [args, context] => {
            check_context_param(context)?;
            (
                quote!(#args),
                quote!(#krate::__private::IntoCallResult::into_call_result(super::#fn_name(args, cx))),
            )
        }
        [_, _, extra, ..] => {
            return Err(syn::Error::new_spanned(
                extra,
                "a #[tool] function takes at most two parameters: the arguments and `&Context`",
            ));
        }
    };
    let bind_args = if params.is_empty() {
        quote!(let _ = #krate::__private::parse_arguments::<#args_type>(#name, arguments)?;)
    } else {
        quote!(let args = #krate::__private::parse_arguments::<#args_type>(#name, arguments)?;)
    };
    let (read_only, idempotent, destructive, open_world) =
        (options.read_only, options.idempotent, options.destructive, options.open_world);
    let vis = &function.vis;
    let module = Ident::new(&fn_name.to_string(), Span::call_site());

    Ok(quote! {
        #function

        #[doc(hidden)]
        #[allow(non_snake_case, unused_imports, clippy::all)]
        #vis mod #module {
            use super::*;

            /// The definition `export_tools!` lists.
            pub const TOOL: #krate::ToolDef = #krate::ToolDef {
                name: #name,
                description: #description,
                annotations: #krate::Annotations {
                    read_only: #read_only,
                    idempotent: #idempotent,
                    destructive: #destructive,
                    open_world: #open_world,
                },
                input_schema: #krate::__private::schema_of::<#args_type>,
                handler,
            };

            fn handler(
                arguments: &str,
                cx: &#krate::Context,
            ) -> ::core::result::Result<#krate::Output, #krate::CallError> {
                let _ = cx;
                #bind_args
                #call
            }
        }
    })
}

/// The second parameter must be `&Context` (any path ending in `Context`).
fn check_context_param(ty: &Type) -> syn::Result<()> {
    if let Type::Reference(r) = ty
        && r.mutability.is_none()
        && let Type::Path(p) = &*r.elem
        && p.path.segments.last().is_some_and(|s| s.ident == "Context")
    {
        return Ok(());
    }
    Err(syn::Error::new_spanned(ty, "the second parameter of a #[tool] function must be `&Context`"))
}
