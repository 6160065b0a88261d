//! How the process's allocator treats the large buffers tensors live in. glibc serves
//! every allocation above its mmap threshold (at most 32 MB, 128 kB at first) with
//! fresh pages from the kernel and returns them on free, so a training step that frees
//! and allocates weight-sized gradients and optimiser moments again and again spends
//! its time in the kernel zeroing pages: on the default-size Diffusion Policy (1 GB of
//! weights) 45% of a training step's samples were `clear_page` (docs/performance.md).
//! Raising the threshold keeps freed tensor buffers in the heap for the next step, and
//! raising the trim threshold keeps the heap from handing its free top back to the
//! kernel after every step (which made a default-size ACT training step of batch 16
//! spend about 15% of its time faulting the same pages in again: 5.2 s against 3.4 to
//! 3.8 s with it raised, docs/performance.md).

/// Largest allocation kept in the heap: larger than any one tensor imago makes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 1 << 30;

/// Free memory at a heap's top kept rather than returned to the kernel: all of it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = i32::MAX;

/// Lets freed tensor buffers be reused without new pages from the kernel. The cost:
/// memory freed by a model stays with the process (its peak resident size stays
/// resident). A threshold the user set (`MALLOC_MMAP_THRESHOLD_`,
/// `MALLOC_TRIM_THRESHOLD_`) is left as it is. Call once, at start-up, before threads
/// allocate; a no-op off glibc.
pub fn reuse_freed_tensor_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (variable, parameter, value) in [
        (
            "MALLOC_MMAP_THRESHOLD_",
            libc::M_MMAP_THRESHOLD,
            MMAP_THRESHOLD,
        ),
        (
            "MALLOC_TRIM_THRESHOLD_",
            libc::M_TRIM_THRESHOLD,
            TRIM_THRESHOLD,
        ),
    ] {
        if std::env::var_os(variable).is_none() {
            // SAFETY: `mallopt` only changes the allocator's tuning; it is called with
            // a documented parameter and an in-range value.
            unsafe {
                libc::mallopt(parameter, value);
            }
        }
    }
}
