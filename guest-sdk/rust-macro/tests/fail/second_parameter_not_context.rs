use tollgate_guest::tool;

/// Looks an order up.
#[tool]
fn lookup_order(order_id: String, cx: &mut tollgate_guest::Context) -> String {
    let _ = cx;
    order_id
}

fn main() {}
