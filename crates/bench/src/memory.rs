//! Resident memory of this process, for `peak_rss_bytes` and memory-overhead figures.

/// Current resident set size in bytes (`VmRSS` of `/proc/self/status`), or 0 if unreadable.
pub fn current_rss_bytes() -> u64 {
    read_status_kib("VmRSS:") * 1024
}

/// Peak resident set size in bytes (`VmHWM`), or 0 if unreadable.
pub fn peak_rss_bytes() -> u64 {
    read_status_kib("VmHWM:") * 1024
}

fn read_status_kib(field: &str) -> u64 {
    read_proc_kib("/proc/self/status", field)
}

/// The number of KiB on the line of `path` (a `/proc` file such as `status` or `smaps_rollup`)
/// that starts with `field` (e.g. `"VmRSS:"`), or 0 if the file or the line is missing.
pub fn read_proc_kib(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rss_is_positive_on_linux() {
        assert!(super::current_rss_bytes() > 0);
        assert!(super::peak_rss_bytes() >= super::current_rss_bytes() / 2);
    }
}
