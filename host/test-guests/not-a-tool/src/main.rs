//! A WASI command (`wasi:cli/run`), not a tool provider: the sandbox must refuse it by name.

#![forbid(unsafe_code)]

fn main() {
    println!("I am a command, not a tool provider");
}
