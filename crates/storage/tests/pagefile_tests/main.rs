//! The page file's tests in one binary (one link instead of eight in the suite): the files and
//! their errors (`files`), power cuts on the simulated disk (`power_cut`), the sums format's
//! property tests (`format_props`), batched reads (`reads`) and their fallback when io_uring is
//! blocked (`reads_fallback`, whose seccomp filter stays on a thread of its own), and direct
//! (`O_DIRECT`) reads (`direct` on the real disk, their property test `direct_props`, the
//! simulated disk and odd file systems in `direct_quirks`).

mod common;
mod direct;
mod direct_props;
mod direct_quirks;
mod discard;
mod files;
mod format_props;
mod power_cut;
mod reads;
mod reads_fallback;
