use tollgate_guest::tool;

/// Looks an order up.
#[tool(name = lookup)]
fn lookup_order() -> String {
    String::new()
}

fn main() {}
