//! The driver's errors and their verbs errno.

use firmware_interface::efa::admin::status as st;
use firmware_interface::efa::opcode;
use nic_hal::{DmaError, IrqError};

/// What was wrong with an admin completion the device wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionFault {
    /// The completion names another command than the one outstanding (the driver has one
    /// command in flight at a time).
    CommandId {
        /// The id the submission carried.
        expected: u16,
        /// The id the completion carried.
        got: u16,
    },
}

/// A driver error. Convert it to the verbs errno with `verbs::Error::from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// EINVAL: an argument the driver refuses before asking the device.
    InvalidArgument,
    /// ENOMEM: no DMA memory left.
    NoMemory,
    /// EOPNOTSUPP: the device or this driver does not offer it.
    NotSupported,
    /// EBUSY: the object is in use.
    Busy,
    /// EIO: the platform could not enable or wait on an interrupt vector.
    Interrupt(nic_hal::IrqError),
    /// DEV_STS.ready did not read 1 in time (before the reset, or at admin init): the device
    /// refuses bring-up.
    NotReady,
    /// A read-less register read was not answered in time (no response with the request's
    /// id was written).
    ReadTimeout {
        /// BAR0 offset of the register.
        offset: u16,
    },
    /// A read-less response carried the request's id but another register's offset.
    BadReadless {
        /// BAR0 offset asked for.
        offset: u16,
        /// Offset the response named.
        got: u16,
    },
    /// DEV_STS.reset_in_progress did not change in time.
    ResetTimeout {
        /// `true`: waiting for the reset to start (after asserting dev_reset); `false`:
        /// waiting for it to end (after releasing it).
        starting: bool,
    },
    /// A register value the driver cannot work with (a version below the minimum, a zero
    /// reset timeout, a DMA width outside 32..=64).
    BadRegister {
        /// BAR0 offset.
        offset: u16,
        /// The value read.
        value: u32,
    },
    /// An admin command did not complete in time. The admin queue is then unusable (the
    /// device may still complete it): every later command is [`Error::AdminDown`].
    AdminTimeout {
        /// Admin opcode.
        opcode: u8,
    },
    /// The device executed an admin command and failed it.
    Admin {
        /// Admin opcode.
        opcode: u8,
        /// Completion status (`firmware_interface::efa::admin::status`).
        status: u8,
        /// Completion `extended_status`.
        extended: u16,
    },
    /// A completion the driver cannot accept. The admin queue is then unusable.
    BadCompletion {
        /// Admin opcode of the command outstanding.
        opcode: u8,
        /// What was wrong.
        fault: CompletionFault,
    },
    /// A successful command's response holds a value the driver cannot use.
    BadOutput {
        /// Admin opcode (for GET_FEATURE: the opcode; the field names the feature).
        opcode: u8,
        /// Which field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// The admin queue is not running (a command timed out or completed wrongly before, or
    /// the device was stopped).
    AdminDown,
}

impl Error {
    /// The Linux errno of the error.
    pub fn errno(&self) -> i32 {
        verbs::Error::from(*self).errno()
    }
}

impl From<DmaError> for Error {
    fn from(e: DmaError) -> Self {
        match e {
            DmaError::InvalidRequest => Error::InvalidArgument,
            DmaError::NoMemory | DmaError::MapFailed | DmaError::OutOfBounds => Error::NoMemory,
        }
    }
}

/// A failed interrupt operation (enabling or waiting on a vector) is [`Error::Interrupt`].
impl From<IrqError> for Error {
    fn from(e: IrqError) -> Self {
        Error::Interrupt(e)
    }
}

impl From<Error> for verbs::Error {
    /// Admin statuses as Linux maps them where an errno says more (resource allocation
    /// failure: ENOMEM, unsupported opcode: EOPNOTSUPP; resource busy: EBUSY, which Linux
    /// folds into EINVAL); every other status the device answered with is kept whole in
    /// [`verbs::Error::Device`] (opcode, status, `extended_status` as the syndrome).
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidArgument => verbs::Error::InvalidArgument,
            Error::NoMemory => verbs::Error::NoMemory,
            Error::NotSupported => verbs::Error::NotSupported,
            Error::Busy => verbs::Error::Busy,
            Error::NotReady
            | Error::ReadTimeout { .. }
            | Error::ResetTimeout { .. }
            | Error::AdminTimeout { .. } => verbs::Error::TimedOut,
            Error::Admin { status, .. } if status == st::RESOURCE_ALLOCATION_FAILURE => {
                verbs::Error::NoMemory
            }
            Error::Admin { status, .. } if status == st::UNSUPPORTED_OPCODE => {
                verbs::Error::NotSupported
            }
            Error::Admin { status, .. } if status == st::RESOURCE_BUSY => verbs::Error::Busy,
            Error::Admin {
                opcode,
                status,
                extended,
            } => verbs::Error::Device(verbs::DeviceFailure::new(
                opcode.into(),
                status,
                extended.into(),
            )),
            Error::BadReadless { .. }
            | Error::BadRegister { .. }
            | Error::BadCompletion { .. }
            | Error::BadOutput { .. }
            | Error::Interrupt(_) => verbs::Error::Io,
            Error::AdminDown => verbs::Error::NoDevice,
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = |op: u8| opcode::name(op).unwrap_or("unknown opcode");
        match *self {
            Error::Admin {
                opcode,
                status,
                extended,
            } => write!(
                f,
                "admin command {} ({opcode}) failed: status {status} ({}), extended status {extended:#x}",
                name(opcode),
                st::name(status).unwrap_or("unknown")
            ),
            Error::AdminTimeout { opcode } => {
                write!(f, "admin command {} ({opcode}) timed out", name(opcode))
            }
            Error::NotReady => write!(f, "the device never became ready (bring-up refused)"),
            other => write!(f, "{other:?}"),
        }
    }
}

impl core::error::Error for Error {}
