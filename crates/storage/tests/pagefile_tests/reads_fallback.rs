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

use prefixkv_testkit::seccomp::deny_io_uring_setup_on_this_thread;

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
        if !deny_io_uring_setup_on_this_thread() {
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
