//! The verbs API (libibverbs semantics with Rust types) and the provider trait that device
//! drivers implement.
//!
//! Only the parts the provider needs for device bring-up exist yet: the error type with its
//! errno mapping and the device-level provider trait.
//!
//! ```
//! use verbs::Error;
//! assert_eq!(Error::NoMemory.errno(), 12);
//! ```
#![cfg_attr(not(test), no_std)]

/// A verbs-level error. Each variant maps to the errno libibverbs returns in that case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// EINVAL: an argument or attribute is not valid.
    InvalidArgument,
    /// ENOMEM: no memory, or the device has no resources left of that kind.
    NoMemory,
    /// EBUSY: the object is still in use.
    Busy,
    /// EIO: the device failed (command error, health failure, timeout).
    Io,
    /// ETIMEDOUT: the device did not answer in time.
    TimedOut,
    /// EOPNOTSUPP: the device does not support this.
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
            Error::Busy => 16,
            Error::Io => 5,
            Error::TimedOut => 110,
            Error::NotSupported => 95,
            Error::NoDevice => 19,
        }
    }
}

/// Device attributes, as `ibv_query_device` reports the ones a provider knows at bring-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version as (major, minor, sub-minor).
    pub fw_ver: (u16, u16, u16),
    /// PCI vendor id.
    pub vendor_id: u32,
    /// PCI device id.
    pub vendor_part_id: u32,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum number of CQs.
    pub max_cq: u32,
    /// Maximum CQEs per CQ.
    pub max_cqe: u32,
    /// Maximum number of memory regions.
    pub max_mr: u32,
    /// Maximum number of protection domains.
    pub max_pd: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// What a device driver offers the verbs layer.
pub trait Provider {
    /// Device attributes as the firmware reported them.
    fn query_device(&self) -> Result<DeviceAttr, Error>;
}
