//! Integration tests of the sandbox against real guest components built from source
//! (`tollgate-test-guests` builds them).
//!
//! - `load`: loading directories, and every way a directory can be wrong;
//! - `calls`: the example tools end to end, argument validation, outbound HTTP;
//! - `hostile`: guests that attack or break their host, each followed by a call that must work;
//! - `escapes`: guests that look for a way around their grants (address spellings, symbolic links);
//! - `factory`: the options-factory component;
//! - `prepared`: instances prepared in advance of calls, fresh and limited per call;
//! - `reach`: whether a call may have taken effect outside the machine.
//! - `sdks`: the Python and JavaScript SDKs' own unit tests.

mod calls;
mod escapes;
mod factory;
mod hostile;
mod languages;
mod load;
mod prepared;
mod reach;
mod sdks;
mod util;
mod wit;
