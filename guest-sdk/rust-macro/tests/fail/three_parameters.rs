use tollgate_guest::tool;

/// Looks an order up.
#[tool]
fn lookup_order(order_id: String, cx: &tollgate_guest::Context, verbose: bool) -> String {
    let _ = (cx, verbose);
    order_id
}

fn main() {}
