//! go-redis v9 against the real server: `tests/go` (a Go module pinning go-redis v9.23.0, its
//! `go.sum` committed) is built once and run in RESP2 and RESP3 against prefixkv-server and
//! against a real redis-server, so its expectations are Redis's own. It covers every command
//! family (strings, keys, hashes, lists with BLPOP, sets, sorted sets), error lines, `Pipeline`,
//! `TxPipeline`, a `Watch` retry spoiled by another client, and Pub/Sub.
//!
//! Fails (never skips) when `go` is missing: the suite's environment has it (`./scripts/test`
//! checks). The first build downloads the modules (bounded by `common::clients::BUILD_LIMIT`);
//! the binary goes to Cargo's `target/tmp`.

mod common;

use std::path::Path;
use std::process::Command;

use common::clients::{build, build_dir, require_tool, run_against_both};

#[test]
fn go_redis_works_in_resp2_and_resp3() {
    require_tool(
        "go",
        &["version"],
        "the go-redis test needs Go 1.26 or newer on PATH (go-redis v9.23 requires it): https://go.dev/dl",
    );
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go");
    let binary = build_dir("go-redis-check").join("go-redis-check");
    let mut go_build = Command::new("go");
    // -mod=readonly: the committed go.sum must already hold every module (nothing is rewritten).
    go_build
        .current_dir(&source)
        .args(["build", "-mod=readonly", "-buildvcs=false", "-o"])
        .arg(&binary)
        .arg(".");
    build("go build tests/go", go_build);
    run_against_both("go-redis", |port, protocol| {
        let mut command = Command::new(&binary);
        command.arg(port.to_string()).arg(protocol.to_string());
        command
    });
}
