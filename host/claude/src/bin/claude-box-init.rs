//! The box init for this crate's tests and benches (`tollgate_box::init`); the `tollgate` package
//! ships the same program as `tollgate-box`.

#![forbid(unsafe_code)]

fn main() {
    tollgate_box::init::main()
}
