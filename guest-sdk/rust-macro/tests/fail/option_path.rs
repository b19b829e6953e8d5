use tollgate_guest::tool;

/// Looks an order up.
#[tool(tollgate::read_only)]
fn lookup_order() -> String {
    String::new()
}

fn main() {}
