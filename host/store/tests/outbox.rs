//! The outbox conformance suite (`tollgate_store_testing::outbox`) on each backend, one test per
//! case per backend: `sqlite::<case>` on a fresh file, `postgres::<case>` on a fresh schema of
//! this binary's one throwaway cluster (a failure without the binaries, unless
//! `TOLLGATE_SKIP_MISSING=postgres`, where they skip, saying so).

tollgate_store_testing::outbox_conformance_tests!();
