//! End-to-end tests live in `e2e/` (run with `cargo xtask test`).
