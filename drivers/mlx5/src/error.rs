//! The driver's error type.
//!
//! Firmware status and delivery codes are kept as numbers in the variants (the PRM's values,
//! see `firmware_interface::cmd_status` and `delivery_status`), so nothing is lost on the way
//! up; [`Error::errno`] gives the errno a Linux mlx5 user would see for the same failure.

use firmware_interface::cmd_status;
use nic_hal::{DmaError, IrqError};

/// errno values used by [`Error::errno`].
mod errno {
    pub const EIO: i32 = 5;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const EBUSY: i32 = 16;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const EOPNOTSUPP: i32 = 95;
    pub const ETIMEDOUT: i32 = 110;
}

/// A general-capability field that failed validation (see [`OutputFault::Capability`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapField {
    /// `log_max_qp` (> 24: QPNs are 24 bits).
    LogMaxQp,
    /// `log_max_qp_sz`.
    LogMaxQpSz,
    /// `log_max_srq` (> 24: SRQNs are 24 bits).
    LogMaxSrq,
    /// `log_max_srq_sz`.
    LogMaxSrqSz,
    /// `log_max_cq`.
    LogMaxCq,
    /// `log_max_cq_sz`.
    LogMaxCqSz,
    /// `log_max_eq`.
    LogMaxEq,
    /// `log_max_eq_sz`.
    LogMaxEqSz,
    /// `log_max_mkey`.
    LogMaxMkey,
    /// `log_max_pd`.
    LogMaxPd,
    /// `log_max_transport_domain`.
    LogMaxTransportDomain,
    /// `log_max_msg`.
    LogMaxMsg,
    /// `log_max_ra_req_qp` / `log_max_ra_res_qp`.
    LogMaxRa,
    /// `port_type` (neither InfiniBand nor Ethernet).
    PortType,
    /// `num_ports` (0).
    NumPorts,
    /// `max_wqe_sz_sq` (< 64 bytes).
    MaxWqeSzSq,
    /// `max_wqe_sz_rq` (< 16 bytes).
    MaxWqeSzRq,
    /// `log_bf_reg_size` (the BlueFlame registers would not fit in the UAR page).
    LogBfRegSize,
    /// `cqe_version` (neither 0 nor 1).
    CqeVersion,
    /// `atomic_caps.atomic_req_8B_endianness_mode` (2 or 3, or not what the driver set).
    AtomicReqEndiannessMode,
}

/// What was wrong with a command output (or an event) the device wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFault {
    /// Output mailbox block `block` carries a token other than the command's.
    Token {
        /// Index of the block in the output chain.
        block: u32,
        /// Token found in the block.
        found: u8,
        /// Token of the command.
        expected: u8,
    },
    /// Output mailbox block `block` carries a wrong `block_num`.
    BlockNumber {
        /// Index of the block in the output chain.
        block: u32,
        /// Block number found in the block.
        found: u32,
    },
    /// An object number (QPN, CQN, PD, mkey index, ...) that cannot be valid: wider than 24
    /// bits, or not below `2^log_max_*` of the capabilities.
    ObjectNumber {
        /// The number the device returned.
        value: u32,
    },
    /// A UAR index whose page would lie outside the BAR (or over the initialization segment).
    UarIndex {
        /// The index the device returned.
        value: u32,
    },
    /// QUERY_PAGES asked for a page count that is negative where it must not be, or above
    /// [`Config::max_fw_pages`](crate::Config::max_fw_pages).
    PageCount {
        /// The (signed) count the device asked for.
        value: i32,
    },
    /// MANAGE_PAGES TAKE returned more entries than requested.
    PageEntries {
        /// `output_num_entries` as returned.
        returned: u32,
        /// `input_num_entries` as requested.
        requested: u32,
    },
    /// MANAGE_PAGES TAKE returned an address that is not a page the driver gave (or returned
    /// it twice).
    PageAddress {
        /// The address returned.
        addr: u64,
    },
    /// A capability field out of range.
    Capability {
        /// Which field.
        field: CapField,
        /// Its value.
        value: u32,
    },
    /// QUERY_QP reported a state value that does not exist, or another service type than the
    /// QP was created with.
    QpContext {
        /// The raw `state` (or `st`) value.
        value: u32,
    },
    /// QUERY_RMP reported a context that is not the SRQ's (another size, stride, PD, doorbell
    /// record or ring format, not ready) or a limit beyond its size.
    SrqContext {
        /// The limit (`wq.lwm`) as reported.
        lwm: u32,
    },
    /// The completed entry or an output mailbox could not be read back (the driver's own
    /// memory access failed after the doorbell): the command may have executed.
    Unreadable,
    /// A force TEARDOWN_HCA reported that it failed (`state` FORCE_STATE_FAIL).
    TeardownState {
        /// The `state` output.
        state: u32,
    },
    /// An EQE of an event type that is unknown or was not subscribed on that EQ.
    EventType {
        /// The EQE `type`.
        event_type: u8,
    },
    /// An EQE whose data is impossible (a CMD vector naming slots that do not exist, ...).
    EventData {
        /// The EQE `type`.
        event_type: u8,
    },
}

/// What was wrong with a CQE (see [`Error::BadCqe`]). Every field of a CQE is checked against
/// the driver's own bookkeeping before it is used; a CQE failing a check is consumed and not
/// turned into a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeFault {
    /// The CQE names a QP that is not attached to this CQ (never created on it, or
    /// destroyed).
    UnknownQp {
        /// The 24-bit QPN of the CQE.
        qpn: u32,
    },
    /// A requester CQE for a QP whose send queue is not on this CQ, or a responder CQE for one
    /// whose receive queue is not.
    WrongQueue {
        /// QPN.
        qpn: u32,
        /// CQE opcode.
        opcode: u8,
    },
    /// `wqe_counter` does not name the start of an outstanding send WQE (requester), or is not
    /// the next receive WQE (responder).
    WqeCounter {
        /// QPN.
        qpn: u32,
        /// The counter as read.
        wqe_counter: u16,
    },
    /// A responder CQE while no receive WQE is outstanding.
    RqEmpty {
        /// QPN.
        qpn: u32,
    },
    /// A CQE opcode that cannot occur on this CQ (resize, tag matching, signature error,
    /// reserved values).
    Opcode {
        /// The `op_own` byte.
        op_own: u8,
    },
    /// A CQE format the driver never enabled (inline scatter, compressed).
    Format {
        /// The `op_own` byte.
        op_own: u8,
    },
    /// A successful requester CQE whose send opcode is not the posted WQE's.
    SendOpcode {
        /// QPN.
        qpn: u32,
        /// Opcode the WQE was posted with.
        posted: u8,
        /// Opcode in the CQE.
        found: u8,
    },
    /// A successful requester CQE for a WQE that did not ask for one.
    Unsignaled {
        /// QPN.
        qpn: u32,
        /// The counter as read.
        wqe_counter: u16,
    },
    /// A byte count larger than the buffers the work request named.
    ByteCount {
        /// QPN.
        qpn: u32,
        /// `byte_cnt` of the CQE.
        byte_cnt: u32,
        /// Bytes the work request can take.
        posted: u32,
    },
}

/// Errors of the mlx5 driver. `Copy`, so they can be stored and compared; each names the
/// command (opcode) where one was involved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The `initializing` bit (init segment 0x1fc bit 31) did not clear within
    /// [`Config::init_timeout_ns`](crate::Config::init_timeout_ns).
    NotReady,
    /// The command interface revision is not 5.
    UnsupportedCmdIf {
        /// The revision the device reports (`cmdif_rev_fw_sub` bits 31:16).
        rev: u32,
    },
    /// The command queue geometry is impossible: more than 32 entries, entries smaller than
    /// 64 bytes, or a queue larger than its 4 KB page.
    BadCmdqGeometry {
        /// `log_cmdq_size` as read.
        log_size: u8,
        /// `log_cmdq_stride` as read.
        log_stride: u8,
    },
    /// The firmware did not hand a command back within
    /// [`Config::cmd_timeout_ns`](crate::Config::cmd_timeout_ns). The command slot is
    /// considered lost and the command interface unusable: every later command fails with this
    /// error too (naming its own opcode) without touching the device.
    CmdTimeout {
        /// Opcode of the command.
        opcode: u16,
    },
    /// The command was not delivered: the entry came back with a non-zero delivery status
    /// (`status_own >> 1`, see `firmware_interface::delivery_status`).
    Delivery {
        /// Opcode of the command.
        opcode: u16,
        /// Delivery status.
        status: u8,
    },
    /// The firmware executed the command and failed it (output `status` != 0).
    Cmd {
        /// Opcode of the command.
        opcode: u16,
        /// Output `status` (see `firmware_interface::cmd_status`).
        status: u8,
        /// Output `syndrome`: firmware-specific detail.
        syndrome: u32,
    },
    /// The device's output failed validation: an impossible object number, a wrong token or
    /// block number in the output chain, an absurd page count, a bad capability, an unknown
    /// event, ... The driver did not act on the value.
    BadOutput {
        /// Opcode of the command (0 for an event read from an EQ).
        opcode: u16,
        /// What was wrong.
        what: OutputFault,
    },
    /// The health buffer reports a failure (`synd` != 0, see
    /// `firmware_interface::init_seg::health_synd`).
    Health {
        /// The health syndrome.
        syndrome: u8,
    },
    /// `nic_interface` (init segment 0x14 bits 10:8) says the interface is disabled (1) or in
    /// software reset (7).
    InterfaceDown {
        /// The `nic_interface` value.
        nic_interface: u8,
    },
    /// The health counter did not move within
    /// [`Config::heartbeat_timeout_ns`](crate::Config::heartbeat_timeout_ns).
    HeartbeatLost,
    /// The device reads as all ones (`fw_ver` = 0xffffffff): the PCI link is gone.
    DeviceGone,
    /// A DMA allocation or access failed.
    Dma(DmaError),
    /// No resources left in the driver (a limit of [`Config`](crate::Config) or of the
    /// capabilities was reached).
    NoResources,
    /// An argument is not valid (out of the range the device or the PRM field allows, or a
    /// QP transition from the wrong state).
    InvalidArgument,
    /// The operation is not possible now (an object is still in use).
    Busy,
    /// The device does not support this (capability bit clear, or wrong port type).
    NotSupported,
    /// A malformed CQE (see [`CqeFault`]): it was consumed, the driver did not act on it.
    BadCqe {
        /// CQ number.
        cqn: u32,
        /// Consumer index of the CQE.
        ci: u32,
        /// What was wrong.
        fault: CqeFault,
    },
    /// A work queue has no room for the work request (libibverbs: ENOMEM).
    QueueFull,
    /// Teardown could not get all pages back from the firmware; they were not freed (leaked on
    /// purpose: the device may still write them).
    PagesNotReclaimed {
        /// Pages still held by the firmware.
        left: u32,
    },
    /// Teardown found objects alive (made through the device and never destroyed, or whose
    /// destroy failed). The device was torn down anyway — graceful TEARDOWN_HCA, then the
    /// force profile when the firmware refused, then DISABLE_HCA, as Linux falls back — and
    /// the objects' memory stays leaked (never freed: the device may have used it until then).
    ObjectsAlive {
        /// What was left.
        live: crate::LiveObjects,
        /// The function was disabled in the end (DISABLE_HCA succeeded): it reaches host
        /// memory no more. False: it may still, and the queue memory stays too.
        stopped: bool,
    },
    /// The platform's interrupt backend failed (enabling or waiting on an MSI-X vector).
    Interrupt(nic_hal::IrqError),
}

impl From<DmaError> for Error {
    fn from(e: DmaError) -> Self {
        Error::Dma(e)
    }
}

/// A failed interrupt operation (enabling or waiting on a vector) is [`Error::Interrupt`].
impl From<IrqError> for Error {
    fn from(e: IrqError) -> Self {
        Error::Interrupt(e)
    }
}

/// errno of a firmware `status`, after Linux `cmd_status_to_err`.
const fn cmd_status_errno(status: u8) -> i32 {
    match status {
        cmd_status::BAD_OP
        | cmd_status::BAD_PARAM
        | cmd_status::BAD_RES
        | cmd_status::BAD_RES_STATE
        | cmd_status::BAD_INDEX
        | cmd_status::BAD_QP_STATE
        | cmd_status::BAD_PKT
        | cmd_status::BAD_SIZE => errno::EINVAL,
        cmd_status::RES_BUSY => errno::EBUSY,
        cmd_status::LIM => errno::ENOMEM,
        cmd_status::NO_RES | cmd_status::NOT_READY => errno::EAGAIN,
        _ => errno::EIO,
    }
}

impl Error {
    /// The errno value a Linux mlx5 user would see for this failure.
    pub const fn errno(&self) -> i32 {
        match *self {
            Error::NotReady | Error::CmdTimeout { .. } | Error::HeartbeatLost => errno::ETIMEDOUT,
            Error::UnsupportedCmdIf { .. } | Error::NotSupported => errno::EOPNOTSUPP,
            Error::BadCmdqGeometry { .. } | Error::InvalidArgument => errno::EINVAL,
            Error::Delivery { .. }
            | Error::BadOutput { .. }
            | Error::Health { .. }
            | Error::InterfaceDown { .. }
            | Error::BadCqe { .. }
            | Error::Interrupt(_) => errno::EIO,
            Error::Cmd { status, .. } => cmd_status_errno(status),
            Error::DeviceGone => errno::ENODEV,
            Error::Dma(DmaError::NoMemory) | Error::NoResources | Error::QueueFull => errno::ENOMEM,
            Error::Dma(DmaError::InvalidRequest) => errno::EINVAL,
            Error::Dma(_) => errno::EIO,
            Error::Busy | Error::PagesNotReclaimed { .. } | Error::ObjectsAlive { .. } => {
                errno::EBUSY
            }
        }
    }
}

/// The verbs error of a driver error: the same errno, and for a command the firmware failed
/// with a status that has no more precise errno than EIO, the command's opcode, status and
/// syndrome ([`verbs::Error::Device`]).
impl From<Error> for verbs::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::DeviceGone => verbs::Error::NoDevice,
            Error::NotReady | Error::CmdTimeout { .. } | Error::HeartbeatLost => {
                verbs::Error::TimedOut
            }
            Error::UnsupportedCmdIf { .. } | Error::NotSupported => verbs::Error::NotSupported,
            Error::Cmd {
                opcode,
                status,
                syndrome,
            } if cmd_status_errno(status) == errno::EIO => {
                verbs::Error::Device(verbs::DeviceFailure::new(opcode, status, syndrome))
            }
            _ => match e.errno() {
                errno::EINVAL => verbs::Error::InvalidArgument,
                errno::ENOMEM => verbs::Error::NoMemory,
                errno::EAGAIN => verbs::Error::Again,
                errno::EBUSY => verbs::Error::Busy,
                _ => verbs::Error::Io,
            },
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Cmd {
                opcode,
                status,
                syndrome,
            } => write!(
                f,
                "command {opcode:#x} failed: status {status:#x} ({}), syndrome {syndrome:#x}",
                cmd_status::name(status).unwrap_or("unknown")
            ),
            Error::ObjectsAlive { live, stopped } => write!(
                f,
                "teardown with objects alive ({live}); the device was {}",
                if stopped {
                    "stopped anyway"
                } else {
                    "NOT stopped"
                }
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

impl core::error::Error for Error {}
