//! The SIGKILL child-process harness every crash test uses.
//!
//! A crash test re-executes its own test binary (or any command) as a child that does real work
//! and reports progress, one line per fact, on its stdout pipe; the parent reads those lines with
//! a bounded wait each, kills the child with SIGKILL at a moment of its choosing, and then
//! recovers and checks. Lines the child printed before it died count: each says something that
//! already happened (an acknowledgement, a publication), so [`ChildProcess::kill`] returns the
//! lines still in the pipe.
//!
//! Invariants:
//! - Every wait is bounded: [`ChildProcess::next_line`] takes a timeout and says whether the child
//!   went quiet or exited.
//! - A child is never left behind: dropping a [`ChildProcess`] kills it with SIGKILL and reaps it.
//! - Test-binary children report with [`report`], which prefixes [`MARKER`]: libtest writes its
//!   own text to the same stdout (`running 1 test`, `test name ... `, sometimes on the same line
//!   as ours), and the parent keeps only what follows the marker.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Prefix of every line a child writes with [`report`].
pub const MARKER: &str = "@@prefixkv@@ ";

/// Writes one line for the parent (`MARKER` + `line`) and flushes, as one write under the stdout
/// lock, so lines from several threads never interleave. A failed write means the parent is gone;
/// it is ignored (the parent kills the child anyway).
pub fn report(line: impl fmt::Display) {
    let text = format!("\n{MARKER}{line}\n");
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The value of environment variable `name`: set by the parent in a child, unset in the parent.
/// A crash test's child-mode `#[test]` returns at once when this is `None`.
pub fn child_mode(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Why [`ChildProcess::next_line`] returned no line.
#[derive(Debug)]
pub enum ChildError {
    /// The child printed nothing for the whole timeout.
    Quiet(Duration),
    /// The child closed its stdout (it exited, or crashed); its exit status if it was reaped.
    Exited(Option<ExitStatus>),
}

impl fmt::Display for ChildError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildError::Quiet(timeout) => {
                write!(formatter, "the child printed nothing for {timeout:?}")
            }
            ChildError::Exited(Some(status)) => {
                write!(formatter, "the child exited on its own ({status})")
            }
            ChildError::Exited(None) => write!(formatter, "the child closed its output"),
        }
    }
}

impl std::error::Error for ChildError {}

/// A child process whose stdout lines the parent reads with bounded waits.
pub struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    /// Keep only lines with [`MARKER`] (test-binary children), else every line.
    marked: bool,
    killed: bool,
}

impl ChildProcess {
    /// Re-executes the current test binary so that it runs only the test `test_name` (its
    /// child-mode entry), with `envs` set; its lines are those written with [`report`].
    pub fn spawn_test(test_name: &str, envs: &[(&str, &OsStr)]) -> std::io::Result<ChildProcess> {
        let mut command = Command::new(std::env::current_exe()?);
        command.args([test_name, "--exact", "--nocapture", "--test-threads=1"]);
        for (name, value) in envs {
            command.env(name, value);
        }
        command.stderr(Stdio::inherit());
        Self::start(command, true)
    }

    /// Starts `command` with its stdout piped (stderr as the command set it, inherited by
    /// default); its lines are those written with [`report`].
    pub fn spawn_reporting(command: Command) -> std::io::Result<ChildProcess> {
        Self::start(command, true)
    }

    /// Starts `command` with its stdout piped; every line it prints counts.
    pub fn spawn(command: Command) -> std::io::Result<ChildProcess> {
        Self::start(command, false)
    }

    fn start(mut command: Command, marked: bool) -> std::io::Result<ChildProcess> {
        command.stdout(Stdio::piped());
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("child-stdout".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            })?;
        Ok(ChildProcess {
            child,
            lines,
            reader: Some(reader),
            marked,
            killed: false,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn keep(&self, line: String) -> Option<String> {
        if !self.marked {
            return Some(line);
        }
        line.find(MARKER)
            .map(|start| line[start + MARKER.len()..].to_string())
    }

    /// The next line, waiting at most `timeout` for it.
    pub fn next_line(&mut self, timeout: Duration) -> Result<String, ChildError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(kept) = self.keep(line) {
                        return Ok(kept);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Err(ChildError::Quiet(timeout)),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    return Err(ChildError::Exited(status));
                }
            }
        }
    }

    /// Lines already received, without waiting.
    pub fn ready_lines(&mut self) -> Vec<String> {
        let raw: Vec<String> = self.lines.try_iter().collect();
        raw.into_iter().filter_map(|line| self.keep(line)).collect()
    }

    /// Sends SIGKILL, reaps the child, and returns every line it printed that was not yet read.
    pub fn kill(mut self) -> Vec<String> {
        self.kill_now();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.ready_lines()
    }

    /// Waits (bounded) for the child to exit on its own; returns its status, or `None` if it was
    /// still running at the deadline (then it is killed).
    pub fn wait_exit(mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.killed = true;
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                self.kill_now();
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill_now(&mut self) {
        if !self.killed {
            // SIGKILL; an error means it already exited, which `wait` then reaps.
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.killed = true;
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Runs `command` to completion like [`Command::output`], but bounded: stdout and stderr are
/// collected on their own threads (so a chatty child cannot block on a full pipe), and a child
/// still running after `timeout` is killed with SIGKILL and reported as `Err` with what it had
/// printed, so a test that expected it to exit fails instead of hanging the suite.
pub fn output_within(
    mut command: Command,
    timeout: Duration,
) -> Result<std::process::Output, String> {
    use std::io::Read;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|error| format!("starting {command:?}: {error}"))?;
    fn collect(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    }
    let stdout = collect(child.stdout.take().expect("stdout is piped"));
    let stderr = collect(child.stderr.take().expect("stderr is piped"));
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting: {e}"))? {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) => Ok(std::process::Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "{command:?} still ran after {timeout:?} and was killed; it printed:\n{}\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )),
    }
}
