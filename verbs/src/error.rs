//! The verbs error type.

/// A command the device (its firmware) executed and failed, as the device reported it: which
/// command, the status it answered with and its detail code. Family-neutral: each provider
/// documents where the three numbers come from (mlx5: the command's opcode, the output
/// `status` and `syndrome`; an EFA admin command would give its opcode, the completion's
/// `status` and `extended_status`).
///
/// Build one with [`DeviceFailure::new`]; the fields stay readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DeviceFailure {
    /// Opcode of the failed command, in the device family's command set.
    pub opcode: u16,
    /// Status the device answered with (never the family's "OK").
    pub status: u8,
    /// Family-specific detail of the failure (0 when the device gives none).
    pub syndrome: u32,
}

impl DeviceFailure {
    /// A failure of command `opcode` with `status` and `syndrome`.
    pub const fn new(opcode: u16, status: u8, syndrome: u32) -> DeviceFailure {
        DeviceFailure {
            opcode,
            status,
            syndrome,
        }
    }
}

impl core::fmt::Display for DeviceFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "device command {:#06x} failed with status {:#04x}, syndrome {:#010x}",
            self.opcode, self.status, self.syndrome
        )
    }
}

/// A verbs-level error. Each variant maps to the errno libibverbs returns in that case
/// ([`Error::errno`]). New variants may be added: match with a wildcard arm (or compare
/// [`Error::errno`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
    /// EIO: the device failed (health failure, a malformed completion or command output, a
    /// command not delivered) where no command status says more; a command the device
    /// executed and failed is [`Error::Device`].
    Io,
    /// ETIMEDOUT: the device did not answer in time.
    TimedOut,
    /// EOPNOTSUPP: the device or provider does not support this.
    NotSupported,
    /// ENODEV: the device is gone or was never brought up.
    NoDevice,
    /// EIO: the device executed a command and failed it with a status that has no more
    /// precise errno (a provider maps statuses meaning "bad argument", "busy", "no
    /// resources", ... to those errnos instead); which command and why are kept.
    Device(DeviceFailure),
}

impl Error {
    /// The errno value libibverbs would report.
    pub const fn errno(self) -> i32 {
        match self {
            Error::InvalidArgument => 22,
            Error::NoMemory => 12,
            Error::Again => 11,
            Error::Busy => 16,
            Error::Io | Error::Device(_) => 5,
            Error::TimedOut => 110,
            Error::NotSupported => 95,
            Error::NoDevice => 19,
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Device(d) => write!(f, "{d} (errno {})", self.errno()),
            _ => write!(f, "{self:?} (errno {})", self.errno()),
        }
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
