//! Nothing: the end-to-end tests are one binary, `tests/main.rs`, and
//! their shared helpers its module `common`. Cargo wants a library or a
//! program in every package; this empty one links nothing, where a library
//! of the helpers had its own test binary with LLVM linked in.
