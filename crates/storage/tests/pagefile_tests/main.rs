//! The page file's tests in one binary (one link instead of five in the suite): the files and
//! their errors (`files`), power cuts on the simulated disk (`power_cut`), the sums format's
//! property tests (`format_props`), batched reads (`reads`) and their fallback when io_uring is
//! blocked (`reads_fallback`, whose seccomp filter stays on a thread of its own).

mod common;
mod files;
mod format_props;
mod power_cut;
mod reads;
mod reads_fallback;
