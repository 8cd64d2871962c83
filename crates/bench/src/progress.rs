//! Progress bars that appear only on a terminal (none in CI logs).

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `steps` steps, hidden unless stderr is a terminal.
pub fn bar(steps: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} {msg} ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

/// Prints `line` above `bar` (so the bar is redrawn below it), or on stderr when the bar is
/// hidden: the one place a run's per-step results go.
pub fn line(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}
