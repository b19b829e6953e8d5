//! `tollgate-box`: the init of every box an agent's CLI runs in (`tollgate_box::init`). A Worker
//! starts it through `bwrap`, from beside its own executable; it is not meant to be run by hand.

#![forbid(unsafe_code)]

fn main() {
    tollgate_box::init::main()
}
