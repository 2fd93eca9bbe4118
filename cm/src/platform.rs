//! The host services the manager needs: a monotonic clock (timeouts, retransmissions,
//! timewait), a relax hook (what a blocking call does between two passes of the progress
//! engine) and entropy (the seed of communication IDs, transaction IDs and starting PSNs, which
//! must differ between two runs of a program, as Linux's CM makes them unique per boot).
//!
//! The trait is the manager's own rather than the verbs layer's: a verbs provider needs neither
//! (its calls never block), so the device interface stays free of host services, and any
//! platform type of a driver stack implements this one with two one-line methods.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

/// What a [`Cm`](crate::Cm) asks of its host.
pub trait Platform {
    /// Called between two passes of the progress engine while a call blocks: a spin hint (or
    /// a yield) on hardware; with an in-process device, a step of the device.
    fn relax(&self);
    /// Monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;
    /// 64 random bits, asked once when a [`Cm`](crate::Cm) is created: mixed into
    /// [`CmConfig::seed`](crate::CmConfig::seed), they seed the manager's communication IDs,
    /// transaction IDs and starting PSNs, so that a restarted program does not send the REQs
    /// of the one before it (a peer would take them for duplicates or stale connections).
    /// Implement it with the host's random source (the OS's on a hosted system, RDRAND on a
    /// bare x86 CPU that has it).
    ///
    /// The default, [`clock_entropy`], mixes the clock with the address of a stack variable:
    /// good enough to tell two runs apart when the clock's zero is not fixed, but not random.
    /// A platform that returns a constant gets the same identities on every run (for
    /// reproducible tests).
    fn entropy(&self) -> u64 {
        clock_entropy(self.now_ns())
    }
}

/// SplitMix64's finaliser: spreads every input bit over the output.
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// [`Platform::entropy`]'s default: `now_ns` mixed with the address of a stack variable
/// (which address-space layout randomisation moves between runs where the host has it) and a
/// count of the calls (so two managers of one program differ even on a clock that stands
/// still).
pub fn clock_entropy(now_ns: u64) -> u64 {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let local = 0u8;
    let addr = core::ptr::addr_of!(local) as usize as u64;
    mix64(now_ns ^ addr.rotate_left(32) ^ mix64(u64::from(n) ^ 0x6A09_E667_F3BC_C908))
}

impl<T: Platform + ?Sized> Platform for Arc<T> {
    fn relax(&self) {
        (**self).relax()
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn entropy(&self) -> u64 {
        (**self).entropy()
    }
}

impl<T: Platform + ?Sized> Platform for &'static T {
    fn relax(&self) {
        (**self).relax()
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn entropy(&self) -> u64 {
        (**self).entropy()
    }
}
