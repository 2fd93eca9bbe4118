//! Work requests, work completions and events.

use crate::flags::{SendFlags, WcFlags};

/// A scatter/gather element (`ibv_sge`): `length` bytes at device address `addr` inside the
/// memory region whose local key is `lkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Address (as registered, see [`MemRegion`](crate::MemRegion)).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// Send work request opcode (`enum ibv_wr_opcode`, with its values except `SendWithInv`:
/// 7 here, `IBV_WR_SEND_WITH_INV` is 9 (libibverbs' 7 and 8, LOCAL_INV and BIND_MW, are not
/// in this layer; the values stay below 8, which a provider's per-opcode tables use). New
/// opcodes may be added; a provider refuses one its QP cannot post with EINVAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum WrOpcode {
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite = 0,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm = 1,
    /// `IBV_WR_SEND`.
    #[default]
    Send = 2,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm = 3,
    /// `IBV_WR_RDMA_READ`.
    RdmaRead = 4,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    AtomicCmpAndSwp = 5,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    AtomicFetchAndAdd = 6,
    /// `IBV_WR_SEND_WITH_INV`: a send that asks the responder to invalidate the rkey in
    /// [`SendWr::imm_data`] (host byte order, as `ibv_send_wr.invalidate_rkey`, which shares
    /// `imm_data`'s union). RC only; the receiver's completion has [`WcFlags::WITH_INV`] and
    /// the rkey. A provider without it refuses the request (mlx5: UD/GSI EINVAL; EFA:
    /// EOPNOTSUPP).
    SendWithInv = 7,
}

/// The remote memory a send work request operates on (`ibv_send_wr.wr.rdma` /
/// `wr.atomic`): none for sends, a buffer for RDMA write and read, a word for atomics. Where
/// the request goes is [`SendWr::dest`] on datagram QPs (the connection on RC). New kinds may
/// be added; a provider refuses one it does not know with EINVAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteOp {
    /// RDMA write / read target. (Declared first: a provider's fast path tests for it
    /// first.)
    Rdma {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// No remote memory (SEND, SEND_WITH_IMM).
    #[default]
    None,
    /// Atomic target: compare-and-swap compares with `compare_add` and writes `swap`;
    /// fetch-and-add adds `compare_add` (`swap` is ignored).
    Atomic {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare value (CAS) or addend (FAA).
        compare_add: u64,
        /// Swap value (CAS).
        swap: u64,
    },
}

/// The destination of a send work request on a datagram QP (UD, GSI, SRD:
/// `ibv_send_wr.wr.ud`, or `ibv_wr_set_ud_addr`); `A` is the provider's address handle type.
#[derive(Debug)]
pub struct UdDest<'a, A> {
    /// Address handle of the destination.
    pub ah: &'a A,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key; with bit 31 set the QP's own Q_Key is used instead (controlled Q_Key).
    pub remote_qkey: u32,
}

impl<A> Clone for UdDest<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for UdDest<'_, A> {}

/// A send work request (`ibv_send_wr`, one element of the list).
///
/// What it targets is two independent parts, as the QP type needs them:
///
/// | QP type | `dest` | `remote` |
/// |---|---|---|
/// | RC | not read (the connection is the destination) | `None` (send), `Rdma`, `Atomic` |
/// | UD, GSI | `Some` | `None` (send only) |
/// | SRD (EFA) | `Some` | `None` (send), `Rdma` (RDMA read / write) |
///
/// A provider refuses (EINVAL) a request whose QP type needs a destination and finds none, or
/// whose `remote` is not what the opcode and QP type take. An RC QP does not read `dest`, as
/// libibverbs' RC does not read `wr.ud` (leave it `None`); so the fast paths spend no test on
/// it.
///
/// Inline sends: Rust cannot read memory it knows only by a device address, so with
/// [`SendFlags::INLINE`] the payload is `inline_data` (CPU memory, copied into the work queue
/// entry) and `sg_list` must be empty. Without INLINE, `inline_data` must be empty.
///
/// `imm_data` is in network byte order, as libibverbs' `__be32 imm_data` (write
/// `value.to_be()`), except for [`WrOpcode::SendWithInv`], where it is the rkey to invalidate
/// in host byte order (libibverbs' `invalidate_rkey`).
///
/// ```
/// use verbs::{RemoteOp, SendWr, Sge, UdDest, WrOpcode};
/// struct Ah; // a provider's address handle
/// let (ah, sge) = (Ah, [Sge { addr: 0x1000, length: 64, lkey: 7 }]);
/// // An SRD RDMA read: from 64 bytes at 0x9000 (rkey 5) of QP 12 behind `ah`.
/// let wr = SendWr {
///     opcode: WrOpcode::RdmaRead,
///     sg_list: &sge,
///     remote: RemoteOp::Rdma { remote_addr: 0x9000, rkey: 5 },
///     dest: Some(UdDest { ah: &ah, remote_qpn: 12, remote_qkey: 0x1111 }),
///     ..SendWr::default()
/// };
/// assert!(wr.dest.is_some());
/// ```
#[derive(Debug)]
pub struct SendWr<'a, A> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// Gather list (zero-length entries are skipped).
    pub sg_list: &'a [Sge],
    /// Inline payload (with [`SendFlags::INLINE`]).
    pub inline_data: &'a [u8],
    /// Immediate data for the *_WITH_IMM opcodes, network byte order; for
    /// [`WrOpcode::SendWithInv`] the rkey to invalidate, host byte order (libibverbs'
    /// `imm_data` / `invalidate_rkey` union).
    pub imm_data: u32,
    /// Remote memory the operation targets.
    pub remote: RemoteOp,
    /// Destination on a datagram QP (UD, GSI, SRD); not read on RC (leave it `None`).
    pub dest: Option<UdDest<'a, A>>,
}

impl<A> Clone for SendWr<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for SendWr<'_, A> {}

impl<A> Default for SendWr<'_, A> {
    fn default() -> Self {
        SendWr {
            wr_id: 0,
            opcode: WrOpcode::Send,
            flags: SendFlags::empty(),
            sg_list: &[],
            inline_data: &[],
            imm_data: 0,
            remote: RemoteOp::None,
            dest: None,
        }
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Scatter list (zero-length entries are skipped). UD: the first 40 bytes receive the GRH.
    pub sg_list: &'a [Sge],
}

/// Completion status (`enum ibv_wc_status`, with its values). New statuses may be added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    #[default]
    Success = 0,
    /// `IBV_WC_LOC_LEN_ERR`.
    LocLenErr = 1,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocQpOpErr = 2,
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    LocEecOpErr = 3,
    /// `IBV_WC_LOC_PROT_ERR`.
    LocProtErr = 4,
    /// `IBV_WC_WR_FLUSH_ERR`.
    WrFlushErr = 5,
    /// `IBV_WC_MW_BIND_ERR`.
    MwBindErr = 6,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadRespErr = 7,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocAccessErr = 8,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemInvReqErr = 9,
    /// `IBV_WC_REM_ACCESS_ERR`.
    RemAccessErr = 10,
    /// `IBV_WC_REM_OP_ERR`.
    RemOpErr = 11,
    /// `IBV_WC_RETRY_EXC_ERR`.
    RetryExcErr = 12,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr = 13,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    LocRddViolErr = 14,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemInvRdReqErr = 15,
    /// `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr = 16,
    /// `IBV_WC_INV_EECN_ERR`.
    InvEecnErr = 17,
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    InvEecStateErr = 18,
    /// `IBV_WC_FATAL_ERR`.
    FatalErr = 19,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RespTimeoutErr = 20,
    /// `IBV_WC_GENERAL_ERR`.
    GeneralErr = 21,
    /// `IBV_WC_TM_ERR`.
    TmErr = 22,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`.
    TmRndvIncomplete = 23,
}

/// Completion opcode (`enum ibv_wc_opcode`, with its values). New opcodes may be added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum WcOpcode {
    /// `IBV_WC_SEND`.
    #[default]
    Send = 0,
    /// `IBV_WC_RDMA_WRITE`.
    RdmaWrite = 1,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead = 2,
    /// `IBV_WC_COMP_SWAP`.
    CompSwap = 3,
    /// `IBV_WC_FETCH_ADD`.
    FetchAdd = 4,
    /// `IBV_WC_BIND_MW`.
    BindMw = 5,
    /// `IBV_WC_LOCAL_INV`.
    LocalInv = 6,
    /// `IBV_WC_RECV`.
    Recv = 128,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm = 129,
}

/// A work completion (`ibv_wc`).
///
/// As in libibverbs, only the fields that apply to the completion are defined; a provider
/// may leave the others unwritten (holding whatever the slice held before the poll), so
/// callers must not read them:
///
/// - always: `wr_id`, `status`, `opcode`, `qp_num`, `vendor_err` and `wc_flags`;
/// - `byte_len`: receives, RDMA read and atomics (send and RDMA write completions leave it
///   undefined);
/// - `imm_data`: with [`WcFlags::WITH_IMM`] or [`WcFlags::WITH_INV`];
/// - `src_qp`, `pkey_index`, `slid`, `sl`, `dlid_path_bits`: receives on UD QPs.
///
/// For an error completion (`status` not `Success`) only `wr_id`, `status`, `qp_num` and
/// `vendor_err` are defined (libibverbs: "the other fields are undefined"), though this
/// crate's providers also set `opcode`.
///
/// `repr(C)` with the fields that every completion defines first (bytes 0..24), so that a
/// provider writes a send completion with a few wide stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (for errors: the operation of the work request as posted, or RECV).
    pub opcode: WcOpcode,
    /// Service level (UD receives; otherwise undefined).
    pub sl: u8,
    /// Destination LID path bits (InfiniBand UD receives; otherwise undefined).
    pub dlid_path_bits: u8,
    /// Local QP number.
    pub qp_num: u32,
    /// Vendor syndrome of an error completion (0 for a success).
    pub vendor_err: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// Bytes received (receives), read (RDMA read) or 8 (atomics); undefined for send and
    /// RDMA write completions.
    pub byte_len: u32,
    /// Immediate data (with `WcFlags::WITH_IMM`) in network byte order, or the invalidated
    /// rkey (with `WcFlags::WITH_INV`); otherwise undefined.
    pub imm_data: u32,
    /// Source QP number (UD receives; otherwise undefined).
    pub src_qp: u32,
    /// P_Key index (UD receives; otherwise undefined).
    pub pkey_index: u16,
    /// Source LID (InfiniBand UD receives; otherwise undefined).
    pub slid: u16,
}

const _: () = assert!(core::mem::size_of::<WorkCompletion>() == 40);

/// A completion event from a completion channel (`ibv_get_cq_event`): CQ `cqn` (created with
/// `cq_context`) has a new completion since it was armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    /// The CQ's number.
    pub cqn: u32,
    /// The context value the CQ was created with.
    pub cq_context: u64,
}

/// Asynchronous event type (`enum ibv_event_type`, with its values). New types may be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum AsyncEventType {
    /// `IBV_EVENT_CQ_ERR` (CQ overrun or access error).
    CqErr = 0,
    /// `IBV_EVENT_QP_FATAL`.
    QpFatal = 1,
    /// `IBV_EVENT_QP_REQ_ERR`.
    QpReqErr = 2,
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    QpAccessErr = 3,
    /// `IBV_EVENT_COMM_EST`.
    CommEst = 4,
    /// `IBV_EVENT_SQ_DRAINED`.
    SqDrained = 5,
    /// `IBV_EVENT_PATH_MIG`.
    PathMig = 6,
    /// `IBV_EVENT_PATH_MIG_ERR`.
    PathMigErr = 7,
    /// `IBV_EVENT_DEVICE_FATAL`.
    DeviceFatal = 8,
    /// `IBV_EVENT_PORT_ACTIVE`.
    PortActive = 9,
    /// `IBV_EVENT_PORT_ERR`.
    PortErr = 10,
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange = 11,
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange = 12,
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange = 13,
    /// `IBV_EVENT_SRQ_ERR`.
    SrqErr = 14,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    SrqLimitReached = 15,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    QpLastWqeReached = 16,
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister = 17,
    /// `IBV_EVENT_GID_CHANGE`.
    GidChange = 18,
    /// `IBV_EVENT_WQ_FATAL`.
    WqFatal = 19,
}

/// What an asynchronous event is about. New kinds of objects may be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncElement {
    /// A CQ, by number.
    Cq(u32),
    /// A QP, by number.
    Qp(u32),
    /// An SRQ, by number.
    Srq(u32),
    /// A port (1-based).
    Port(u8),
    /// The device.
    Device,
}

/// An asynchronous event (`ibv_get_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// Event type.
    pub event_type: AsyncEventType,
    /// Object it concerns.
    pub element: AsyncElement,
}
