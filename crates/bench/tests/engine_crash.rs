//! Crash tests of the engine: 30 SIGKILLs of a loaded, checkpointing child at random moments,
//! rotating over all five strategies; every recovery must be a verified prefix-consistent image of
//! the newest reported version or the one after it. `prefixkv-bench crash --iterations N` runs the
//! same check for as long as you like.

use std::process::Command;

#[test]
fn thirty_random_kills_recover_prefix_consistent_images() {
    let out = tempfile::tempdir().unwrap();
    let iterations = std::env::var("PREFIXKV_CRASH_ITERATIONS").unwrap_or_else(|_| "30".into());
    let mut command = Command::new(env!("CARGO_BIN_EXE_prefixkv-bench"));
    command
        .args([
            "crash",
            "--iterations",
            &iterations,
            "--keys",
            "5000",
            "--seed",
            "7",
            "--out",
        ])
        .arg(out.path())
        .arg("--data-dir")
        .arg(out.path());
    let output =
        prefixkv_testkit::child::output_within(command, std::time::Duration::from_secs(600))
            .expect("running prefixkv-bench crash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "crash stress failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("crash.json")).unwrap())
            .unwrap();
    assert_eq!(report["verified"], true);
    let kills: u64 = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kills"].as_u64().unwrap())
        .sum();
    assert_eq!(kills.to_string(), iterations);
}
