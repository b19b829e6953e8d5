//! `#[sqlx_bounds(DB)]`: the sqlx bounds the store's generic code needs of its database `DB`,
//! written once.
//!
//! The store's code is generic over the sqlx database (SQLite or PostgreSQL) and binds and
//! decodes the same few Rust types everywhere: `&str`, `Option<&str>`, `&[u8]`, `i64`,
//! `Option<i64>`, `bool`, `String`, `Vec<u8>`. Each needs a bound such as
//! `for<'a> &'a str: Encode<'a, DB> + Type<DB>`, and Rust does not carry a trait's `where` clauses
//! to the trait's users (only bounds on `Self` are implied), so a trait cannot hold them: every
//! generic item would spell the list out again. This attribute adds the list to the `where`
//! clause of the item it marks (an `impl` block or a function), after the bounds written there.
//!
//! ```ignore
//! #[sqlx_bounds(DB)]
//! #[async_trait::async_trait]
//! impl<B, DB> Outbox for B
//! where
//!     B: Backend<Db = DB>,
//!     DB: OutboxDialect,
//! { /* … */ }
//! ```
//!
//! # Caveats
//!
//! - Every marked item gets the whole list, used or not; both databases satisfy all of it, so an
//!   unused bound costs nothing. A new bound type goes here, once.
//! - The generated bounds name `::sqlx`: the crate using the attribute depends on sqlx.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::{Generics, Ident, Item, Token, WherePredicate, parse_quote};

/// Adds the store's sqlx bounds on the database type parameter named in the attribute (such as
/// `DB`) to the marked `impl` block's or function's `where` clause. See the crate docs.
#[proc_macro_attribute]
pub fn sqlx_bounds(attr: TokenStream, item: TokenStream) -> TokenStream {
    let db = syn::parse_macro_input!(attr as Ident);
    let mut item = syn::parse_macro_input!(item as Item);
    let generics = match &mut item {
        Item::Impl(block) => &mut block.generics,
        Item::Fn(function) => &mut function.sig.generics,
        other => {
            return syn::Error::new_spanned(other, "#[sqlx_bounds] marks an `impl` block or a function")
                .to_compile_error()
                .into();
        }
    };
    if let Err(error) = add_bounds(generics, &db) {
        return error.to_compile_error().into();
    }
    quote!(#item).into()
}

fn add_bounds(generics: &mut Generics, db: &Ident) -> syn::Result<()> {
    if !generics.type_params().any(|p| p.ident == *db) {
        return Err(syn::Error::new_spanned(db, format!("no type parameter `{db}` on the marked item")));
    }
    generics.make_where_clause().predicates.extend(bounds(db));
    Ok(())
}

/// The list, in one place.
fn bounds(db: &Ident) -> Punctuated<WherePredicate, Token![,]> {
    parse_quote! {
        #db::Arguments: ::sqlx::IntoArguments<#db>,
        for<'c> &'c mut #db::Connection: ::sqlx::Executor<'c, Database = #db>,
        for<'a> &'a str: ::sqlx::Encode<'a, #db> + ::sqlx::Type<#db> + ::sqlx::ColumnIndex<#db::Row>,
        for<'a> Option<&'a str>: ::sqlx::Encode<'a, #db>,
        for<'a> &'a [u8]: ::sqlx::Encode<'a, #db> + ::sqlx::Type<#db>,
        for<'a> i64: ::sqlx::Encode<'a, #db> + ::sqlx::Decode<'a, #db> + ::sqlx::Type<#db>,
        for<'a> Option<i64>: ::sqlx::Encode<'a, #db>,
        for<'a> bool: ::sqlx::Encode<'a, #db> + ::sqlx::Decode<'a, #db> + ::sqlx::Type<#db>,
        for<'a> String: ::sqlx::Decode<'a, #db> + ::sqlx::Type<#db>,
        for<'a> Vec<u8>: ::sqlx::Decode<'a, #db> + ::sqlx::Type<#db>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_follows_the_bounds_written_on_the_item() {
        let mut generics: Generics = parse_quote!(<B, DB>);
        generics.where_clause = Some(parse_quote!(where B: Backend<Db = DB>, DB: Dialect));
        add_bounds(&mut generics, &parse_quote!(DB)).unwrap();
        let predicates = &generics.where_clause.unwrap().predicates;
        assert_eq!(predicates.len(), 2 + bounds(&parse_quote!(DB)).len());
        let first = predicates.first().unwrap();
        assert_eq!(quote!(#first).to_string(), quote!(B: Backend<Db = DB>).to_string());
        let last = predicates.last().unwrap();
        assert_eq!(
            quote!(#last).to_string(),
            quote!(for<'a> Vec<u8>: ::sqlx::Decode<'a, DB> + ::sqlx::Type<DB>).to_string()
        );
    }

    #[test]
    fn an_item_without_the_named_parameter_is_refused_by_name() {
        let mut generics: Generics = parse_quote!(<B, Db>);
        let error = add_bounds(&mut generics, &parse_quote!(DB)).unwrap_err();
        assert_eq!(error.to_string(), "no type parameter `DB` on the marked item");
        assert!(generics.where_clause.is_none());
    }
}
