use tollgate_guest::tool;

/// Only functions are tools.
#[tool]
struct LookupOrder;

fn main() {}
