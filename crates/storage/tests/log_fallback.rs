//! io_uring blocked the way Docker's default seccomp profile blocks it (`io_uring_setup` fails
//! with EPERM): `Auto` must fall back to pwritev and work; forcing io_uring must fail with a
//! clear reason. The seccomp filter is installed on a thread of its own (filters apply to the
//! installing thread and the threads it creates, here the log's I/O thread), so other tests in
//! this binary are unaffected.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use prefixkv_storage::log::{BackendChoice, BackendKind, Log, LogConfig, LogError};

#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

/// BPF_LD | BPF_W | BPF_ABS (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
/// BPF_JMP | BPF_JEQ | BPF_K (0x05 | 0x10 | 0x00).
const BPF_JMP_JEQ_K: u16 = 0x15;
/// BPF_RET | BPF_K.
const BPF_RET_K: u16 = 0x06;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

/// Makes `io_uring_setup` fail with EPERM for this thread and its future children; false if
/// this environment does not let us install a seccomp filter.
fn block_io_uring_for_this_thread() -> bool {
    let errno_eperm = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & 0xffff);
    let op = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    let program = [
        // Only judge x86_64 system calls (seccomp_data.arch at offset 4); allow anything else.
        op(BPF_LD_W_ABS, 0, 0, 4),
        op(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        op(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        // seccomp_data.nr at offset 0: io_uring_setup gets EPERM, the rest is allowed.
        op(BPF_LD_W_ABS, 0, 0, 0),
        op(BPF_JMP_JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
        op(BPF_RET_K, 0, 0, errno_eperm),
        op(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = SockFprog {
        len: program.len() as u16,
        filter: program.as_ptr(),
    };
    // SAFETY: plain prctl calls; `fprog` and `program` outlive the call (the kernel copies them).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            let why = format!(
                "PR_SET_NO_NEW_PRIVS failed: {}",
                std::io::Error::last_os_error()
            );
            prefixkv_testkit::skip::unavailable("seccomp", &why);
            return false;
        }
        let installed = libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const SockFprog,
        );
        if installed != 0 {
            let why = format!(
                "installing a seccomp filter failed: {}",
                std::io::Error::last_os_error()
            );
            prefixkv_testkit::skip::unavailable("seccomp", &why);
            return false;
        }
    }
    true
}

#[test]
fn blocked_io_uring_falls_back_to_pwritev() {
    std::thread::spawn(|| {
        if !block_io_uring_for_this_thread() {
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
