//! Tests that need a facility the machine may lack (io_uring, seccomp) fail when it is missing,
//! unless the person running them says skipping is fine.
//!
//! A test that returns early when what it tests is unavailable passes without testing: on a
//! machine (or container) where io_uring is blocked, the io_uring tests would all be green and
//! prove nothing. So a missing facility is a failure by default; `PREFIXKV_TEST_ALLOW_SKIP` names
//! the facilities that may be skipped on this machine, comma-separated (`io_uring,seccomp`), or
//! `all`. A skip that is allowed still prints why, so the log shows what was not tested.

/// The environment variable that lists the facilities a test run may skip.
pub const ALLOW_SKIP_VAR: &str = "PREFIXKV_TEST_ALLOW_SKIP";

/// True if `facility` may be skipped according to `setting` (the variable's value, if set).
pub fn allowed_by(setting: Option<&str>, facility: &str) -> bool {
    setting.is_some_and(|value| {
        value
            .split(',')
            .map(str::trim)
            .any(|item| item == "all" || item.eq_ignore_ascii_case(facility))
    })
}

/// Called where a test finds `facility` unavailable (`why` says how): returns if skipping it is
/// allowed (after printing so), panics otherwise with the message that says how to allow it.
///
/// # Panics
/// When `facility` is not listed in `PREFIXKV_TEST_ALLOW_SKIP`: the test must not pass untested.
pub fn unavailable(facility: &str, why: &str) {
    let setting = std::env::var(ALLOW_SKIP_VAR).ok();
    if allowed_by(setting.as_deref(), facility) {
        eprintln!("skipping ({ALLOW_SKIP_VAR} allows {facility}): {why}");
        return;
    }
    panic!(
        "{facility} is unavailable here, so this test cannot test it: {why}. Set \
         {ALLOW_SKIP_VAR}={facility} to skip such tests on this machine (see the README)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_facilities_may_be_skipped() {
        assert!(!allowed_by(None, "io_uring"));
        assert!(!allowed_by(Some(""), "io_uring"));
        assert!(!allowed_by(Some("seccomp"), "io_uring"));
        assert!(allowed_by(Some("seccomp, io_uring"), "io_uring"));
        assert!(allowed_by(Some("all"), "seccomp"));
    }
}
