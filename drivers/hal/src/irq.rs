//! Interrupt vectors (MSI-X) as a driver sees them.
//!
//! A device raises vector `n` (an MSI-X message) when it has something to say: an mlx5 EQ
//! that the driver armed fires the vector named in its context when the device writes an
//! event into it. A backend that can deliver those messages to the driver implements
//! [`Interrupts`] and hands it out through [`Platform::interrupts`](crate::Platform::interrupts):
//! a host process wakes a condition variable or an eventfd, a Linux guest reads the eventfds
//! VFIO signals, a unikernel counts in its interrupt handler and halts in between.
//!
//! Vectors are counted, not latched: every delivery of vector `n` increments its count, and
//! a waiter names the count it saw last ([`IrqWatch`]). So the race-free wait is
//!
//! 1. read the count of the vector ([`Interrupts::count`]),
//! 2. arm the event source and check it (e.g. poll the EQ, which re-arms it),
//! 3. if nothing was there, [`Interrupts::wait`] for the count to move past the one read in
//!    step 1, then go back to 1.
//!
//! An interrupt raised between 1 and 3 moves the count, and the wait returns at once. Any
//! number of waiters may watch the same vector; none of them consumes a delivery another one
//! needs, so there is no separate acknowledgement (end-of-interrupt is the backend's
//! business).

/// Why an interrupt operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqError {
    /// The vector is not one of the backend's (`vector >= vectors()`).
    NoSuchVector,
    /// The backend could not enable or wait on the vector (a host call failed).
    Backend,
}

/// One vector and the delivery count its waiter saw last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqWatch {
    /// MSI-X vector index.
    pub vector: u16,
    /// The value [`Interrupts::count`] returned for it.
    pub seen: u64,
}

/// The interrupt vectors of one device function.
pub trait Interrupts {
    /// How many vectors the device has (its MSI-X table size as the backend set it up);
    /// vectors are `0..vectors()`.
    fn vectors(&self) -> u16;
    /// Unmasks vector `vector`: from now on its messages are delivered (one raised while it
    /// was masked is delivered now, as an MSI-X pending bit is). Idempotent.
    fn enable(&self, vector: u16) -> Result<(), IrqError>;
    /// How many times `vector` has been delivered since the backend was set up (0 for a
    /// vector that does not exist).
    fn count(&self, vector: u16) -> u64;
    /// Blocks until the count of any watched vector differs from its `seen` value, or until
    /// `timeout_ns` nanoseconds passed. Returns whether a vector fired (`false`: timeout).
    /// The calling thread sleeps meanwhile; it does not spin.
    fn wait(&self, watch: &[IrqWatch], timeout_ns: u64) -> Result<bool, IrqError>;
}

impl<T: Interrupts + ?Sized> Interrupts for alloc::sync::Arc<T> {
    fn vectors(&self) -> u16 {
        (**self).vectors()
    }
    fn enable(&self, vector: u16) -> Result<(), IrqError> {
        (**self).enable(vector)
    }
    fn count(&self, vector: u16) -> u64 {
        (**self).count(vector)
    }
    fn wait(&self, watch: &[IrqWatch], timeout_ns: u64) -> Result<bool, IrqError> {
        (**self).wait(watch, timeout_ns)
    }
}
