//! Resident memory of this process, for `peak_rss_bytes` and memory-overhead figures, and of
//! another process by PID (a server the benchmark started), from `/proc/<pid>/status`.

/// Current resident set size in bytes (`VmRSS` of `/proc/self/status`), or 0 if unreadable.
pub fn current_rss_bytes() -> u64 {
    read_status_kib("VmRSS:") * 1024
}

/// Peak resident set size in bytes (`VmHWM`), or 0 if unreadable.
pub fn peak_rss_bytes() -> u64 {
    read_status_kib("VmHWM:") * 1024
}

/// Resident set size in bytes of process `pid` (`VmRSS` of `/proc/<pid>/status`), or `None` if
/// the process is gone or the line is missing: a caller that computes a difference must not take
/// a vanished process for one that uses no memory.
pub fn rss_bytes_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_kib(&text, "VmRSS:").map(|kib| kib * 1024)
}

fn read_status_kib(field: &str) -> u64 {
    read_proc_kib("/proc/self/status", field)
}

/// The number of KiB on the line of `path` (a `/proc` file such as `status` or `smaps_rollup`)
/// that starts with `field` (e.g. `"VmRSS:"`), or 0 if the file or the line is missing.
pub fn read_proc_kib(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| parse_kib(&text, field))
        .unwrap_or(0)
}

/// The number on the first line of `text` that starts with `field`, in the `/proc` format
/// `VmRSS:     123456 kB`; `None` if no line starts with `field` or its number does not parse.
pub fn parse_kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_positive_on_linux() {
        assert!(current_rss_bytes() > 0);
        assert!(peak_rss_bytes() >= current_rss_bytes() / 2);
    }

    #[test]
    fn rss_of_a_pid_reads_our_own_and_refuses_a_missing_process() {
        assert!(rss_bytes_of(std::process::id()).unwrap() > 0);
        // PIDs are at most 2^22 on Linux: this one cannot exist.
        assert_eq!(rss_bytes_of(u32::MAX), None);
    }

    #[test]
    fn the_parser_takes_the_named_line_only() {
        let status =
            "Name:\tredis-server\nVmHWM:\t  20480 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 999 kB\n";
        assert_eq!(parse_kib(status, "VmRSS:"), Some(12345));
        assert_eq!(parse_kib(status, "VmHWM:"), Some(20480));
        assert_eq!(parse_kib(status, "VmSwap:"), None);
        assert_eq!(parse_kib("VmRSS:\tlots kB\n", "VmRSS:"), None);
        assert_eq!(parse_kib("", "VmRSS:"), None);
    }
}
