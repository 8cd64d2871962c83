//! Property test of direct reads: random (page, offset, len) reads into buffers at random
//! alignments return the bytes written, through `read` and through `PageReads` (the synchronous
//! backend, so that a failing case shrinks without a ring in between; the io_uring backend
//! takes the same slots and requests, and is compared in `direct`). One page file (on a file
//! system that grants `O_DIRECT` where the machine has one) serves every case.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::cell::RefCell;
use std::sync::Arc;

use super::direct::{buffer_at, Fixture, VALID};
use prefixkv_storage::pagefile::{PageReads, ReadBackendChoice};

#[test]
fn random_reads_return_the_bytes_written() {
    let fixture = Fixture::new(true);
    let reader = PageReads::with_backend(
        Arc::clone(&fixture.file),
        1,
        16 << 10,
        ReadBackendChoice::Sync,
    )
    .unwrap();
    // `run` takes an `Fn`: the reader and the buffer are borrowed per case.
    let reader = RefCell::new(reader);
    let backing = RefCell::new(Vec::new());
    let mut runner = TestRunner::new(Config {
        cases: 512,
        ..Config::default()
    });
    let pages: Vec<(u64, usize)> = VALID.into_iter().filter(|(_, valid)| *valid > 0).collect();
    let strategy = (
        0..pages.len(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        0usize..4096,
    );
    runner
        .run(&strategy, |(which, at, length, shift)| {
            let (page, valid) = pages[which];
            let offset = at.index(valid);
            let len = 1 + length.index(valid - offset);
            let want = &fixture.expected[&page][offset..offset + len];
            let mut backing = backing.borrow_mut();
            let buf = buffer_at(&mut backing, len, shift);
            fixture.file.read(page, offset as u32, buf).unwrap();
            prop_assert_eq!(
                &buf[..],
                want,
                "read: page {} at {}, {} bytes",
                page,
                offset,
                len
            );
            let mut reader = reader.borrow_mut();
            reader.submit(page, offset as u32, len as u32, 0).unwrap();
            let mut got = None;
            reader
                .complete(true, |_, result| got = Some(result.map(<[u8]>::to_vec)))
                .unwrap();
            let got = got
                .expect("the synchronous backend finishes at submit")
                .unwrap();
            prop_assert_eq!(&got[..], want, "PageReads: page {} at {}", page, offset);
            Ok(())
        })
        .unwrap();
    fixture.check_direct(true);
}
