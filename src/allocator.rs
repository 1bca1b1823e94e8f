//! The daemon's global allocator: mimalloc, asked through its plain entry points whenever
//! a plain block already has the alignment Rust asks for.
//!
//! The `mimalloc` crate's allocator passes every request to `mi_malloc_aligned`, with the
//! alignment Rust's `Layout` carries. mimalloc 3 serves an aligned request from its fast
//! path only below 1 KiB, or when the block size is a power of two; every other one (a
//! 1,864-byte future, a 5,312-byte exchange) takes the generic path and over-allocates,
//! about 200 instructions instead of 30, and a few bytes more per block. Measured with
//! callgrind on a cached 4 KiB GET: the two boxed futures of each request cost 420
//! instructions that way, 3.5 % of musicd's own per request.
//!
//! A plain mimalloc block is 16-byte aligned from 16 bytes up (its size classes above 16
//! are multiples of 16 and a page's first block is 16-aligned), and 8-byte aligned below.
//! So when the alignment is at most 16 and divides the size, which is true of every Rust
//! type's layout up to 16-byte alignment, the plain call gives the same guarantee.
//! Anything else still goes to the aligned calls.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};

/// mimalloc's guaranteed alignment of a plain block (`MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

/// mimalloc as the global allocator, through its plain calls where they suffice.
#[derive(Debug, Clone, Copy, Default)]
pub struct MiMalloc;

/// Whether a plain block of `size` bytes is aligned to `align`.
fn plain_suffices(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && size.is_multiple_of(align)
}

// SAFETY: each method hands mimalloc a size and alignment it accepts, and returns its
// block (or null) unchanged. Blocks from the plain and the aligned calls are both freed
// and resized by `mi_free` and `mi_realloc`, which find an aligned block's start
// themselves; a resize keeps the alignment, through the aligned call when a plain block
// of the new size would not have it.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain_suffices(layout.size(), layout.align()) {
            // SAFETY: `layout`'s size is non-zero (the caller's contract).
            unsafe { mi_malloc(layout.size()) }.cast()
        } else {
            // SAFETY: as above, and the alignment is a power of two (`Layout`'s).
            unsafe { mi_malloc_aligned(layout.size(), layout.align()) }.cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain_suffices(layout.size(), layout.align()) {
            // SAFETY: as in `alloc`.
            unsafe { mi_zalloc(layout.size()) }.cast()
        } else {
            // SAFETY: as in `alloc`.
            unsafe { mi_zalloc_aligned(layout.size(), layout.align()) }.cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain_suffices(new_size, layout.align()) {
            // SAFETY: `ptr` came from this allocator and `new_size` is non-zero (the
            // caller's contract).
            unsafe { mi_realloc(ptr.cast::<c_void>(), new_size) }.cast()
        } else {
            // SAFETY: as above, and the alignment is a power of two (`Layout`'s).
            unsafe { mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()) }.cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of `layout` from `allocator`, checked for its alignment.
    fn block(allocator: &MiMalloc, layout: Layout, zeroed: bool) -> *mut u8 {
        let block = if zeroed {
            // SAFETY: the tests ask for non-zero sizes only.
            unsafe { allocator.alloc_zeroed(layout) }
        } else {
            // SAFETY: as above.
            unsafe { allocator.alloc(layout) }
        };
        assert!(!block.is_null(), "{layout:?}");
        assert_eq!(block as usize % layout.align(), 0, "{layout:?}");
        block
    }

    /// The first `len` bytes of `block`.
    fn bytes<'a>(block: *mut u8, len: usize) -> &'a mut [u8] {
        // SAFETY: every caller's block holds at least `len` bytes and outlives the slice.
        unsafe { std::slice::from_raw_parts_mut(block, len) }
    }

    /// Every block honours its layout's alignment and keeps its bytes across a resize,
    /// on either path: sizes around mimalloc's size-class edges, alignments up to a page.
    #[test]
    fn blocks_are_aligned_and_keep_their_bytes_across_resizes() {
        let allocator = MiMalloc;
        let mut sizes: Vec<usize> = (1..=300).collect();
        for edge in [512, 1024, 1864, 4096, 5312, 65536, 1 << 20, 5 << 20] {
            sizes.extend([edge - 8, edge - 1, edge, edge + 1, edge + 8]);
        }
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for &size in &sizes {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                let zeroed = block(&allocator, layout, true);
                assert!(bytes(zeroed, size).iter().all(|&b| b == 0), "{layout:?}");
                // SAFETY: allocated above with `layout`.
                unsafe { allocator.dealloc(zeroed, layout) };

                for new_size in [size * 3 + 5, size, (size / 2).max(1)] {
                    let fill = (size % 251) as u8;
                    let old = block(&allocator, layout, false);
                    bytes(old, size).fill(fill);
                    // SAFETY: `old` has `layout`; `new_size` is non-zero.
                    let resized = unsafe { allocator.realloc(old, layout, new_size) };
                    assert!(!resized.is_null());
                    assert_eq!(
                        resized as usize % align,
                        0,
                        "{size} -> {new_size} / {align}"
                    );
                    let kept = bytes(resized, size.min(new_size));
                    assert!(kept.iter().all(|&b| b == fill), "{size} -> {new_size}");
                    let Ok(new_layout) = Layout::from_size_align(new_size, align) else {
                        panic!("{new_size} / {align}");
                    };
                    // SAFETY: `resized` has `new_layout` now.
                    unsafe { allocator.dealloc(resized, new_layout) };
                }
            }
        }
    }
}
