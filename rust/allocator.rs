//! The core's allocator: the system's, asking the kernel to back large blocks with huge pages.
//!
//! glibc maps every block from 4 MB up for itself (the writer fixes its threshold there, see
//! `writer::tasks`) and unmaps it when it is freed: the next block of that size is fresh
//! memory, faulted in 4 KB at a time. Some work allocates such blocks over and over: a Parquet
//! file's pages are each decompressed into a block of their size (13.6 MB in the benchmark's
//! files), and faulting those in took a fifth of a Parquet build's CPU time. Huge pages (2 MB,
//! where the system gives them on request: transparent huge pages in `madvise` mode or
//! `always`) take a fault each instead of 512, with nothing kept after the block is freed.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks from this size up are backed by huge pages (glibc's mapping threshold, as the writer
/// sets it).
const LARGE: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

pub struct Allocator;

// SAFETY: the system allocator's blocks, unchanged; only the kernel is told how to back them.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let block = unsafe { System.alloc(layout) };
        if layout.size() >= LARGE && !block.is_null() {
            advise_huge(block, layout.size());
        }
        block
    }

    /// The system's own: calloc takes fresh pages from the kernel already zeroed, where the
    /// default (alloc, then zero) would write every page of a large block.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let block = unsafe { System.alloc_zeroed(layout) };
        if layout.size() >= LARGE && !block.is_null() {
            advise_huge(block, layout.size());
        }
        block
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let block = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size >= LARGE && !block.is_null() {
            advise_huge(block, new_size);
        }
        block
    }
}

/// Asks for huge pages over the whole 2 MB pages of the block (advice only: nothing changes
/// if the system does not follow it).
fn advise_huge(block: *mut u8, size: usize) {
    let start = (block as usize).next_multiple_of(HUGE_PAGE);
    let end = (block as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: a range of pages inside a block just allocated; MADV_HUGEPAGE keeps contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}
