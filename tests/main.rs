//! The end-to-end tests, one module per topic, in one binary: LLVM is
//! linked statically, so each test binary costs a 300 MB link, and one
//! binary lets the harness spread every test over the cores at once.
//! Run one topic with `cargo test -p rocmc-tests --test e2e -- remote::`.

/// The helpers every topic shares.
pub mod common;

mod accuracy;
mod app;
mod attention;
mod bad;
mod bench_plan;
mod bits;
mod bounded;
mod build_script;
mod cli;
mod codeobject;
mod conv;
mod default_schedule;
mod difffuzz;
mod f8;
mod fills;
mod fuzz;
mod gather;
mod grid;
mod header;
mod matrix;
mod mma;
mod nvptx;
mod python;
mod races;
mod regress;
mod remote;
mod remote_holes;
mod run;
mod run_data;
mod runtime;
mod sampled;
mod scan;
mod scatter;
mod snapshots;
mod targets;
mod tma;
mod topk;
mod triangular;
mod tune;
mod tuple;
mod wgmma;
