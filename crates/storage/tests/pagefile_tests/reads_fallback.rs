//! `PageReads` with `Auto` on the real disk where io_uring cannot be set up (`io_uring_setup`
//! fails with EPERM, as under Docker's default seccomp profile): it must fall back to the
//! synchronous backend with a reason and read correctly; forcing io_uring must be a clear error.
//! The seccomp filter is installed on a thread of its own (filters bind the installing thread
//! and its children), so nothing else in the process is affected.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use prefixkv_storage::pagefile::{
    PageFile, PageFileConfig, PageReads, ReadBackend, ReadBackendChoice, ReadsError,
};
use prefixkv_storage::real_disk;
use std::sync::Arc;

/// Makes `io_uring_setup` fail with EPERM on this thread; false (after asking the test kit
/// whether skipping is allowed) where a filter cannot be installed.
fn deny_io_uring_setup_here() -> bool {
    // Classic BPF over `struct seccomp_data` (nr at offset 0, arch at offset 4).
    const LOAD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const ARCH_X86_64: u32 = 0xc000_003e;
    let step = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let deny = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let mut program = [
        step(LOAD_WORD, 0, 0, 4),
        step(JUMP_IF_EQUAL, 1, 0, ARCH_X86_64),
        step(RETURN, 0, 0, libc::SECCOMP_RET_ALLOW),
        step(LOAD_WORD, 0, 0, 0),
        step(JUMP_IF_EQUAL, 0, 1, libc::SYS_io_uring_setup as u32),
        step(RETURN, 0, 0, deny),
        step(RETURN, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: prctl with a program that outlives the call (the kernel copies it).
    let failed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ) != 0
    };
    if failed {
        let why = format!("seccomp filter: {}", std::io::Error::last_os_error());
        prefixkv_testkit::skip::unavailable("seccomp", &why);
        return false;
    }
    true
}

#[test]
fn auto_falls_back_to_synchronous_reads_when_io_uring_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let config = PageFileConfig {
        page_bytes: 4096,
        pages_per_segment: 4,
        direct_io: true,
    };
    let (file, _) = PageFile::open(real_disk(), dir.path(), config).unwrap();
    let page: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
    file.write_page(1, &page, 4096).unwrap();
    file.sync().unwrap();
    let file = Arc::new(file);
    std::thread::spawn(move || {
        if !deny_io_uring_setup_here() {
            return;
        }
        let error = PageReads::with_backend(Arc::clone(&file), 4, 4096, ReadBackendChoice::IoUring)
            .unwrap_err();
        assert!(
            matches!(error, ReadsError::IoUringUnavailable(_)),
            "{error}"
        );
        assert!(
            error.to_string().contains("io_uring_setup failed"),
            "{error}"
        );
        let mut reader = PageReads::new(Arc::clone(&file), 4, 4096).unwrap();
        assert_eq!(reader.backend(), ReadBackend::Sync);
        let reason = reader.fallback_reason().unwrap().to_string();
        assert!(reason.contains("io_uring_setup failed"), "{reason}");
        reader.submit(1, 100, 1000, 7).unwrap();
        reader.submit_verified_page(1, 8).unwrap();
        let mut seen = Vec::new();
        let n = reader
            .complete(true, |token, result| {
                let bytes = result.unwrap();
                match token {
                    7 => assert_eq!(bytes, &page[100..1100]),
                    _ => assert_eq!(bytes, page.as_slice()),
                }
                seen.push(token);
            })
            .unwrap();
        assert_eq!((n, seen), (2, vec![7, 8]));
    })
    .join()
    .expect("the thread with io_uring blocked");
}
