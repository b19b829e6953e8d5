use tollgate_guest::tool;

#[tool(read_only)]
fn lookup_order() -> String {
    String::new()
}

fn main() {}
