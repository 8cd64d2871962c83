//! A miniature `prefixkv-bench cpr` run: every contender, checkpoints, recovery and verification,
//! and the JSON fields the issue names. Sizes are tiny; numbers are not checked (never time in a test).

use std::process::Command;

#[test]
fn tiny_cpr_run_writes_a_verified_report_with_every_summary_field() {
    let out = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_prefixkv-bench"));
    command
        .args([
            "cpr",
            "--keys",
            "3000",
            "--seconds",
            "0.4",
            "--rounds",
            "1",
            "--threads",
            "2",
            "--checkpoint-interval-ms",
            "100",
            "--out",
        ])
        .arg(out.path())
        .arg("--data-dir")
        .arg(out.path());
    let output =
        prefixkv_testkit::child::output_within(command, std::time::Duration::from_secs(300))
            .expect("running prefixkv-bench cpr");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cpr failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("cpr.json")).unwrap())
            .unwrap();
    assert_eq!(report["verified"], true);
    for field in [
        "persian_over_cpr_copy",
        "persian_over_none",
        "persian_during_over_outside",
        "blocking_during_over_outside",
        "engine_over_dashmap",
        "engine_over_papaya",
        "engine_batched_over_dashmap",
        "engine_batched_over_papaya",
        "hints_over_no_hints",
        "persian_memory_overhead",
    ] {
        assert!(
            report["summary"].get(field).is_some(),
            "summary lacks {field}"
        );
    }
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "one row per contender");
    for row in rows {
        for field in [
            "throughput_ops_per_s",
            "checkpoint_duration_ms",
            "checkpoint_bytes",
            "peak_rss_bytes",
            "verified",
        ] {
            assert!(row.get(field).is_some(), "row lacks {field}: {row}");
        }
    }
    // Every checkpointing contender recovered a checkpoint taken while its workers ran.
    for row in rows {
        let variant = row["variant"].as_str().unwrap();
        if !["none", "none-no-hints", "dashmap", "papaya"].contains(&variant) {
            assert_eq!(row["under_load_verified"], true, "{variant}: {row}");
        }
    }
    let checks = report["checks"].as_array().unwrap();
    assert!(
        checks.iter().any(|c| c["what"]
            .as_str()
            .unwrap()
            .contains("taken while the workers ran")
            && c["passed"] == true),
        "no passing under-load check: {checks:?}"
    );
    assert!(out.path().join("cpr.png").exists() && out.path().join("cpr.svg").exists());
    assert!(out.path().join("cpr-timeline.png").exists());
}
