//! The `#[tool]` attribute as a tool author meets it: each error it reports on purpose, with the
//! message the author reads (`fail/*.rs` beside its `fail/*.stderr`), and tools that compile and
//! answer calls on the host (`pass/`). One run, so the cases share one build of the SDK.
//!
//! After a deliberate change of a message, `TRYBUILD=overwrite cargo test -p tollgate-guest-macro`
//! rewrites the `.stderr` files; read their diff before committing it.

#[test]
fn each_error_of_the_tool_attribute_names_what_is_wrong_and_a_tool_runs() {
    // trybuild builds the cases and the SDK's dependency tree in a target directory of its own,
    // without the workspace's profiles: without debug info it takes 250 MB of disk instead of 620.
    // SAFETY: this binary's one test sets the variable before starting anything that reads the
    // environment (trybuild's cargo inherits it).
    unsafe { std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "false") };
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/fail/*.rs");
    cases.pass("tests/pass/*.rs");
}
