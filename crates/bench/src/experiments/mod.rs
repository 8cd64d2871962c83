//! One module per experiment; `main.rs` lists them as subcommands.
pub mod ctrie;
