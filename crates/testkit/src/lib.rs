//! prefixkv-testkit: what every crash test and experiment of prefixkv shares.
//!
//! - [`acknowledged`]: the per-connection oracle for servers: recovery shows a prefix of each
//!   connection's writes, and what is missing of what the client was acknowledged is a suffix.
//! - [`oracle`]: deterministic per-session workloads and the prefix oracle, which checks a
//!   recovered state against what the clients were acknowledged, never against what the system
//!   reports about itself.
//! - [`child`]: the SIGKILL child-process harness (re-execute a test binary or run a command, read
//!   its progress lines with bounded waits, kill it, keep the lines it printed before it died).
//! - [`counters`]: client-side counters in a shared file mapping, readable after a SIGKILL.
//! - [`fs`]: copying a store's directory aside, subdirectories included.
//! - [`net`]: loopback ports for tests that start servers, outside the kernel's ephemeral range.
//! - [`rng`]: seeded randomness with a replayable seed, and `env_count` for test sizes.
//! - [`seccomp`]: io_uring blocked for one thread, for the io_uring fallback tests.
//! - [`skip`]: a test whose facility (io_uring, seccomp) is missing fails unless
//!   `PREFIXKV_TEST_ALLOW_SKIP` allows skipping it.
//!
//! A dev-dependency of every crate with crash tests, and a dependency of `prefixkv-bench`.

#![warn(missing_docs)]

pub mod acknowledged;
pub mod child;
pub mod counters;
pub mod fs;
pub mod net;
pub mod oracle;
pub mod rng;
pub mod seccomp;
pub mod skip;

pub use rng::env_count;
