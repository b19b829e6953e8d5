use tollgate_guest::tool;

struct Orders;

impl Orders {
    /// Looks an order up.
    #[tool]
    fn lookup_order(&self) -> String {
        String::new()
    }
}

fn main() {}
