//! Blocking io_uring for one thread, as Docker's default seccomp profile does for a whole
//! container (`io_uring_setup` fails with EPERM): the fallback tests of every io_uring user
//! (the log's writer, the page file's reads) run their code on a thread that called
//! [`deny_io_uring_setup_on_this_thread`].
//!
//! A seccomp filter binds the thread that installs it and the threads it creates afterwards,
//! never the rest of the process, so the other tests of the binary are unaffected.

/// Makes `io_uring_setup` fail with EPERM for the calling thread and the threads it creates from
/// now on. Returns false, after [`crate::skip::unavailable`] (which fails the test unless
/// skipping is allowed), where this environment does not let a filter be installed.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn deny_io_uring_setup_on_this_thread() -> bool {
    // Classic BPF over `struct seccomp_data` (the system call number at offset 0, the
    // architecture at offset 4).
    const LOAD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let step = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let deny = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & 0xffff);
    let mut program = [
        // Judge only x86_64 system calls; allow anything else.
        step(LOAD_WORD, 0, 0, 4),
        step(JUMP_IF_EQUAL, 1, 0, AUDIT_ARCH_X86_64),
        step(RETURN, 0, 0, libc::SECCOMP_RET_ALLOW),
        // io_uring_setup gets EPERM, every other call is allowed.
        step(LOAD_WORD, 0, 0, 0),
        step(JUMP_IF_EQUAL, 0, 1, libc::SYS_io_uring_setup as u32),
        step(RETURN, 0, 0, deny),
        step(RETURN, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let program_ref = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls; `program_ref` and `program` outlive them (the kernel copies
    // the filter).
    let failure = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            Some("PR_SET_NO_NEW_PRIVS")
        } else if libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program_ref as *const libc::sock_fprog,
        ) != 0
        {
            Some("installing a seccomp filter")
        } else {
            None
        }
    };
    match failure {
        Some(step) => {
            let why = format!("{step} failed: {}", std::io::Error::last_os_error());
            crate::skip::unavailable("seccomp", &why);
            false
        }
        None => true,
    }
}
