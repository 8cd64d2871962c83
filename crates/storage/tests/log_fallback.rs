//! io_uring blocked the way Docker's default seccomp profile blocks it (`io_uring_setup` fails
//! with EPERM): `Auto` must fall back to pwritev and work; forcing io_uring must fail with a
//! clear reason. The seccomp filter is installed on a thread of its own (filters apply to the
//! installing thread and the threads it creates, here the log's I/O thread), so other tests in
//! this binary are unaffected.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use prefixkv_storage::log::{BackendChoice, BackendKind, Log, LogConfig, LogError};

use prefixkv_testkit::seccomp::deny_io_uring_setup_on_this_thread;

#[test]
fn blocked_io_uring_falls_back_to_pwritev() {
    std::thread::spawn(|| {
        if !deny_io_uring_setup_on_this_thread() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        match Log::open(
            dir.path(),
            LogConfig {
                backend: BackendChoice::IoUring,
                ..LogConfig::default()
            },
        ) {
            Err(LogError::BackendUnavailable(why)) => {
                assert!(why.contains("io_uring_setup failed"), "{why}");
                assert!(
                    why.contains("seccomp") || why.contains("io_uring_disabled"),
                    "{why}"
                );
            }
            other => panic!(
                "forcing a blocked io_uring must fail, got {:?}",
                other.map(|(_, r)| r)
            ),
        }
        let (log, report) = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(report.backend, BackendKind::Pwritev);
        assert_eq!(log.append(b"after fallback").unwrap().wait().unwrap(), 1);
        assert_eq!(log.durable_lsn(), 1);
        let records: Vec<_> = log.replay(1).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(records, vec![(1, b"after fallback".to_vec())]);
    })
    .join()
    .expect("fallback thread");
}
