//! One module per experiment; `main.rs` lists them as subcommands.

pub mod cpr;
pub mod crash;
pub mod ctrie;
pub mod dpr;
pub mod dredis;
pub mod oplog;
pub mod server;
pub mod smr;
pub mod tick;
pub mod wal;
pub mod ycsb;
