//! Jedis 8.0.2 against the real server: `tests/java` (a Maven project pinning Jedis and every
//! plugin) is built once and its `prefixkv.JedisCheck` run in RESP2 and RESP3 against
//! prefixkv-server and against a real redis-server, so its expectations are Redis's own. It
//! covers every command family (strings, keys, hashes, lists with BLPOP, sets, sorted sets),
//! error lines, `Pipeline`, `Transaction` with WATCH retried after another client's write, and
//! Pub/Sub with the subscriber on its own thread.
//!
//! Fails (never skips) when `mvn` or `java` is missing: the suite's environment has them
//! (`./scripts/test` checks). The first build downloads Jedis and the Maven plugins (bounded by
//! `common::clients::BUILD_LIMIT`); classes and jars go to Cargo's `target/tmp`.

mod common;

use std::path::Path;
use std::process::Command;

use common::clients::{build, build_dir, require_tool, run_against_both};

#[test]
fn jedis_works_in_resp2_and_resp3() {
    let install = "the Jedis test needs Java 17 or newer and Maven 3.8 or newer on PATH \
                   (Debian: openjdk-17-jdk-headless maven)";
    require_tool("java", &["-version"], install);
    require_tool("mvn", &["-v"], install);
    let pom = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/pom.xml");
    let output = build_dir("jedis-check");
    let mut maven = Command::new("mvn");
    maven
        // Quiet, batch, no colour codes: a failure's output is read in a test report.
        .args(["-q", "-B", "-Dstyle.color=never", "-f"])
        .arg(&pom)
        .arg(format!("-Dcheck.build.dir={}", output.display()))
        .args(["compile", "dependency:copy-dependencies"]);
    build("mvn compile tests/java", maven);
    let classpath = format!(
        "{}:{}",
        output.join("classes").display(),
        output.join("dependency/*").display()
    );
    run_against_both("Jedis", |port, protocol| {
        let mut command = Command::new("java");
        // A short-lived program: the quick JIT tier and the serial collector start fastest.
        command
            .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
            .arg(&classpath)
            .arg("prefixkv.JedisCheck")
            .arg(port.to_string())
            .arg(protocol.to_string());
        command
    });
}
