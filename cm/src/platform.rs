//! The host services the manager needs: a monotonic clock (timeouts, retransmissions,
//! timewait) and a relax hook (what a blocking call does between two passes of the progress
//! engine).
//!
//! The trait is the manager's own rather than the verbs layer's: a verbs provider needs neither
//! (its calls never block), so the device interface stays free of host services, and any
//! platform type of a driver stack implements this one with two one-line methods.

use alloc::sync::Arc;

/// What a [`Cm`](crate::Cm) asks of its host.
pub trait Platform {
    /// Called between two passes of the progress engine while a call blocks: a spin hint (or
    /// a yield) on hardware; with an in-process device, a step of the device.
    fn relax(&self);
    /// Monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;
}

impl<T: Platform + ?Sized> Platform for Arc<T> {
    fn relax(&self) {
        (**self).relax()
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

impl<T: Platform + ?Sized> Platform for &'static T {
    fn relax(&self) {
        (**self).relax()
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}
