//! `prefixkv-smr`: a replicated key-value store. Commands are ordered by Raft (openraft 0.9,
//! storage-v2) and applied to a state held either in a `BTreeMap` (checkpoints block applying)
//! or in a CTrie (checkpoints take an O(1) snapshot at the exact log index and are written in the
//! background), after SMaRtTrie (Pintor et al.).
//!
//! Parts, one module each:
//! - [`log_store`]: the Raft log on `prefixkv-storage`'s shared log (group commit), the durable
//!   vote and purge point;
//! - [`wire`]: the messages on the Raft port and their framing (length-prefixed postcard),
//!   shared by `network` and `forward`;
//! - [`network`]: Raft RPCs between replicas over TCP;
//! - [`store`] and [`state_machine`]: the two state models, apply, checkpoints every Δ commands,
//!   snapshot install, recovery;
//! - [`checkpoint`]: the checkpoint file format (CRC32C) and the checkpoints published through
//!   `prefixkv-storage`'s version catalog;
//! - [`client`]: the RESP client protocol (redis-cli works, on any replica) and a cluster-aware
//!   client;
//! - [`forward`]: followers forward writes to the leader and serve linearizable reads with the
//!   leader's read index;
//! - [`node`]: one replica wired together.
//!
//! `docs/smr.md` tells how to run a 3-replica cluster and what checkpoints and recovery do.

#![warn(missing_docs)]

pub mod checkpoint;
pub mod client;
pub mod forward;
pub mod log_store;
pub mod network;
pub mod node;
pub mod state_machine;
pub mod store;
pub mod types;
pub mod wire;

pub use node::{Node, NodeConfig};
pub use store::StateModel;
