//! The verbs error type.

/// A verbs-level error. Each variant maps to the errno libibverbs returns in that case
/// ([`Error::errno`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// EINVAL: an argument or attribute is not valid (a transition the QP state table does not
    /// allow, more SGEs than the QP was created with, inline data larger than its
    /// `max_inline_data`, an opcode the QP type cannot post, ...).
    InvalidArgument,
    /// ENOMEM: no memory, the device has no resources left of that kind, or a work queue is
    /// full (libibverbs' providers return ENOMEM from `ibv_post_send` / `ibv_post_recv` when
    /// the queue has no room).
    NoMemory,
    /// EAGAIN: try again later (the device is temporarily out of a resource).
    Again,
    /// EBUSY: the object is still in use (a CQ with QPs, a PD with MRs or QPs, a channel with
    /// CQs).
    Busy,
    /// EIO: the device failed (command error, health failure, a malformed completion).
    Io,
    /// ETIMEDOUT: the device did not answer in time.
    TimedOut,
    /// EOPNOTSUPP: the device or provider does not support this.
    NotSupported,
    /// ENODEV: the device is gone or was never brought up.
    NoDevice,
}

impl Error {
    /// The errno value libibverbs would report.
    pub const fn errno(self) -> i32 {
        match self {
            Error::InvalidArgument => 22,
            Error::NoMemory => 12,
            Error::Again => 11,
            Error::Busy => 16,
            Error::Io => 5,
            Error::TimedOut => 110,
            Error::NotSupported => 95,
            Error::NoDevice => 19,
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?} (errno {})", self.errno())
    }
}

impl core::error::Error for Error {}

/// A failed `post_send` / `post_recv`: the error and the index of the first work request that
/// was not posted (libibverbs' `bad_wr`). Every work request before it was posted (and the
/// doorbell rung for them); it and every later one were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PostError {
    /// Why the work request was refused.
    pub error: Error,
    /// Index in the slice of the work request that failed.
    pub bad_wr: usize,
}

/// A failed destroy / dealloc / dereg: the error, and the object when it is still valid (the
/// provider found it busy, or the device refused the command: the object can be used or
/// destroyed again). `object` is `None` when the device may or may not have destroyed it (a
/// timeout, a malformed answer); then its memory is kept (leaked) rather than freed under a
/// device that might still use it.
#[derive(Debug)]
pub struct DestroyError<T> {
    /// Why it failed.
    pub error: Error,
    /// The object, still valid, when the failure left it intact.
    pub object: Option<T>,
}

impl<T> DestroyError<T> {
    /// An error that hands the (intact) object back.
    pub fn keep(error: Error, object: T) -> Self {
        DestroyError {
            error,
            object: Some(object),
        }
    }

    /// An error after which the object is gone from the caller's hands.
    pub fn lost(error: Error) -> Self {
        DestroyError {
            error,
            object: None,
        }
    }
}
