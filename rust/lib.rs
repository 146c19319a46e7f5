//! toksmith's Rust core: the hot loops only (pre-tokenization, BPE encoding and training).
//! No Python types here except in `py/`, the binding layer, built with the `python` feature.

pub mod error;
pub mod models;
pub mod normalize;
pub mod pretokenize;
pub mod special;
pub mod train;

#[cfg(feature = "python")]
mod py;

/// Starts loading the cache line of `x` into the CPU cache: a hint, it changes nothing else.
/// For loops that know a few iterations ahead which scattered element they will need.
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults or writes; the address is that of a live value.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(x as *const T as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// For tests: a seeded pseudo-random generator (an LCG); each call gives a number below `m`.
#[cfg(test)]
pub(crate) fn lcg(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |m| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % m
    }
}
