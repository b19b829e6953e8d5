//! Empty: it makes the `[build-dependencies]` count, so their features unify with the proc
//! macros' (build scripts and proc macros share one feature set).
fn main() {}
