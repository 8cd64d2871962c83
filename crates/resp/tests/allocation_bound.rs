//! No allocation is sized by a length or count the peer claims.
//!
//! A counting global allocator records, per thread, the bytes allocated and the largest single
//! allocation while a parser runs. Claimed sizes of 512 MiB and a million elements must cost
//! no more than a few KiB.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::BytesMut;
use prefixkv_resp::{parse_reply, Limits, RequestParser};

struct CountingAllocator;

thread_local! {
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
    static LARGEST_ALLOCATION_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    // `try_with`: the thread-local may already be gone while a thread shuts down.
    let _ = ALLOCATED_BYTES.try_with(|total| total.set(total.get() + size));
    let _ = LARGEST_ALLOCATION_BYTES.try_with(|largest| largest.set(largest.get().max(size)));
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `work` and returns (bytes allocated, largest single allocation) on this thread.
fn measure(work: impl FnOnce()) -> (usize, usize) {
    ALLOCATED_BYTES.with(|total| total.set(0));
    LARGEST_ALLOCATION_BYTES.with(|largest| largest.set(0));
    work();
    (
        ALLOCATED_BYTES.with(Cell::get),
        LARGEST_ALLOCATION_BYTES.with(Cell::get),
    )
}

const SMALL_BYTES: usize = 16 * 1024;

#[test]
fn claimed_sizes_do_not_allocate_in_the_request_parser() {
    let inputs: [&[u8]; 4] = [
        b"*1\r\n$536870912\r\nabc",
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$536870912\r\nxyz",
        b"*1048576\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"*2147483647\r\n",
    ];
    for input in inputs {
        let mut parser = RequestParser::new(Limits {
            max_multibulk_len: i32::MAX as usize,
            ..Limits::default()
        });
        let mut buffer = BytesMut::with_capacity(4096);
        buffer.extend_from_slice(input);
        let (total, largest) = measure(|| {
            for _ in 0..10 {
                assert_eq!(parser.parse(&mut buffer), Ok(None));
            }
        });
        assert!(
            total < SMALL_BYTES && largest < SMALL_BYTES,
            "{:?}: {total} bytes allocated, largest {largest}",
            String::from_utf8_lossy(input)
        );
        assert!(
            buffer.capacity() < 1024 * 1024,
            "the parser reserved buffer space"
        );
    }
}

#[test]
fn a_huge_bulk_costs_only_the_bytes_received() {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::with_capacity(4096);
    buffer.extend_from_slice(b"*1\r\n$536870912\r\n");
    // Receive 1 MiB of the claimed 512 MiB in 64 KiB reads, parsing after each.
    let chunk = vec![b'x'; 64 * 1024];
    let (_, largest_in_parser) = measure(|| assert_eq!(parser.parse(&mut buffer), Ok(None)));
    assert!(largest_in_parser < SMALL_BYTES);
    for _ in 0..16 {
        buffer.extend_from_slice(&chunk);
        let (total, _) = measure(|| assert_eq!(parser.parse(&mut buffer), Ok(None)));
        assert_eq!(total, 0, "waiting for payload bytes allocates nothing");
    }
    assert!(
        buffer.capacity() < 8 * 1024 * 1024,
        "capacity {}",
        buffer.capacity()
    );
}

#[test]
fn claimed_sizes_do_not_allocate_in_the_reply_decoder() {
    let limits = Limits {
        max_multibulk_len: i32::MAX as usize,
        ..Limits::default()
    };
    let inputs: [&[u8]; 6] = [
        b"$536870912\r\nabc",
        b"*2147483647\r\n:1\r\n:2\r\n",
        b"%2147483647\r\n+a\r\n",
        b"~2147483647\r\n",
        b"*2\r\n*1048576\r\n$536870912\r\n",
        b"=536870912\r\ntxt:",
    ];
    for input in inputs {
        let mut buffer = BytesMut::from(input);
        let (total, largest) = measure(|| {
            for _ in 0..10 {
                assert_eq!(parse_reply(&mut buffer, limits), Ok(None));
            }
        });
        assert!(
            total < SMALL_BYTES && largest < SMALL_BYTES,
            "{:?}: {total} bytes allocated, largest {largest}",
            String::from_utf8_lossy(input)
        );
    }
}
