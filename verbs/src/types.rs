//! Attribute types: device, port, GID, address handle, memory region, QP.

use crate::flags::AccessFlags;

/// Firmware version text (`ibv_device_attr.fw_ver`, a `char[64]`): at most
/// [`FwVersion::CAPACITY`] bytes of UTF-8, kept inline (no allocation), read with
/// [`as_str`](FwVersion::as_str).
///
/// Built from a string ([`FwVersion::new`]) or formatted into ([`core::fmt::Write`]: text that
/// does not fit is refused whole, the version keeps what it had).
///
/// ```
/// use core::fmt::Write;
/// use verbs::FwVersion;
/// let mut v = FwVersion::default();
/// write!(v, "{}.{}.{:04}", 16, 35, 2000).unwrap();
/// assert_eq!(v.as_str(), "16.35.2000");
/// assert_eq!(v, FwVersion::new("16.35.2000").unwrap());
/// assert!(FwVersion::new(&"9".repeat(64)).is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FwVersion {
    /// Bytes used.
    len: u8,
    /// The text in `buf[..len]`; the rest is zero (so the derived comparisons see only the
    /// text).
    buf: [u8; FwVersion::CAPACITY],
}

impl FwVersion {
    /// Most bytes of text: `ibv_device_attr.fw_ver` is 64 bytes with a terminating NUL.
    pub const CAPACITY: usize = 63;

    /// The version `text`; [`Error::InvalidArgument`](crate::Error::InvalidArgument) if it is
    /// longer than [`CAPACITY`](Self::CAPACITY) bytes or holds a NUL byte (C readers would
    /// stop there).
    pub fn new(text: &str) -> Result<FwVersion, crate::Error> {
        let mut v = FwVersion::default();
        v.push(text).map_err(|_| crate::Error::InvalidArgument)?;
        Ok(v)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only whole `&str`s are appended, so the bytes are UTF-8; the fallback cannot happen.
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }

    /// Whether there is no text.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The text as `ibv_device_attr.fw_ver` holds it: NUL-terminated, zero-padded to 64
    /// bytes.
    pub fn to_c_bytes(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        out[..Self::CAPACITY].copy_from_slice(&self.buf);
        out
    }

    /// Appends `text` whole, or nothing when it does not fit or holds a NUL.
    fn push(&mut self, text: &str) -> Result<(), core::fmt::Error> {
        let at = self.len as usize;
        let end = at + text.len();
        if end > Self::CAPACITY || text.as_bytes().contains(&0) {
            return Err(core::fmt::Error);
        }
        self.buf[at..end].copy_from_slice(text.as_bytes());
        self.len = end as u8;
        Ok(())
    }
}

impl Default for FwVersion {
    fn default() -> Self {
        FwVersion {
            len: 0,
            buf: [0; FwVersion::CAPACITY],
        }
    }
}

impl core::fmt::Write for FwVersion {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s)
    }
}

impl core::fmt::Display for FwVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::fmt::Debug for FwVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "FwVersion({:?})", self.as_str())
    }
}

impl PartialEq<str> for FwVersion {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for FwVersion {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Atomic operation support (`enum ibv_atomic_cap`, with its values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`: no atomic operations.
    #[default]
    None = 0,
    /// `IBV_ATOMIC_HCA`: atomic operations are atomic with respect to other atomics through
    /// this device only (not to CPU accesses or other devices).
    Hca = 1,
    /// `IBV_ATOMIC_GLOB`: atomic with respect to every access, CPU included.
    Glob = 2,
}

/// Device attributes, as `ibv_query_device` reports the ones a provider knows (a limit the
/// device does not have reads 0: an EFA device has no atomics and no SRQs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version, as the family's tools print it (mlx5: `major.minor.subminor` with
    /// the sub-minor in 4 digits, e.g. `16.35.2000`).
    pub fw_ver: FwVersion,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// PCI device id.
    pub vendor_part_id: u32,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum scatter/gather entries per send or receive work request of any QP type (not
    /// RDMA read; see `max_sge_rd`).
    pub max_sge: u32,
    /// Maximum scatter entries per RDMA read work request.
    pub max_sge_rd: u32,
    /// Maximum inline data bytes per send work request of any QP type (`QpCap`'s
    /// `max_inline_data` at creation may ask up to this).
    pub max_inline_data: u32,
    /// Maximum number of CQs.
    pub max_cq: u32,
    /// Maximum CQEs per CQ.
    pub max_cqe: u32,
    /// Maximum number of memory regions.
    pub max_mr: u32,
    /// Maximum number of protection domains.
    pub max_pd: u32,
    /// Maximum outstanding RDMA reads and atomics a QP handles as responder (the largest
    /// `QpAttr::max_dest_rd_atomic`).
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA reads and atomics a QP initiates (the largest
    /// `QpAttr::max_rd_atomic`).
    pub max_qp_init_rd_atom: u32,
    /// Atomic operation support.
    pub atomic_cap: AtomicCap,
    /// Maximum number of SRQs (0: no SRQs).
    pub max_srq: u32,
    /// Maximum work requests per SRQ.
    pub max_srq_wr: u32,
    /// Maximum scatter entries per SRQ work request.
    pub max_srq_sge: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// A 128-bit global identifier (`union ibv_gid`), in network byte order. RoCE v2 over IPv4
/// uses the IPv4-mapped IPv6 form `::ffff:a.b.c.d`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID of `ip` (`::ffff:a.b.c.d`).
    pub const fn from_ipv4(ip: [u8; 4]) -> Gid {
        Gid([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
        ])
    }

    /// The IPv4 address if this is an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        (g[..10] == [0u8; 10] && g[10] == 0xff && g[11] == 0xff)
            .then(|| [g[12], g[13], g[14], g[15]])
    }

    /// Whether all bytes are zero (an unset GID table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0u8; 16]
    }
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        128 << self as u32
    }

    /// The largest IB MTU whose packets fit in an Ethernet MTU of `eth_mtu` bytes after the
    /// RoCE headers (GRH 40, BTH 12, the largest extension header 28 + 4, ICRC 4), as the
    /// Linux RoCE drivers compute it; `None` below 256.
    pub const fn for_ethernet(eth_mtu: u32) -> Option<Mtu> {
        let room = eth_mtu.saturating_sub(40 + 12 + 4 + 28 + 4);
        Some(if room >= 4096 {
            Mtu::Mtu4096
        } else if room >= 2048 {
            Mtu::Mtu2048
        } else if room >= 1024 {
            Mtu::Mtu1024
        } else if room >= 512 {
            Mtu::Mtu512
        } else if room >= 256 {
            Mtu::Mtu256
        } else {
            return None;
        })
    }
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PortState {
    /// `IBV_PORT_NOP`.
    #[default]
    Nop = 0,
    /// `IBV_PORT_DOWN`.
    Down = 1,
    /// `IBV_PORT_INIT`.
    Init = 2,
    /// `IBV_PORT_ARMED`.
    Armed = 3,
    /// `IBV_PORT_ACTIVE`.
    Active = 4,
    /// `IBV_PORT_ACTIVE_DEFER`.
    ActiveDefer = 5,
}

/// Link layer of a port (`IBV_LINK_LAYER_*`). New values may be added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum LinkLayer {
    /// Not reported, or neither InfiniBand nor Ethernet (an EFA port).
    #[default]
    Unspecified = 0,
    /// InfiniBand.
    InfiniBand = 1,
    /// Ethernet (RoCE).
    Ethernet = 2,
}

/// Port attributes (`ibv_query_port`), the fields a provider without a subnet manager knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in effect (RoCE: derived from the Ethernet MTU).
    pub active_mtu: Mtu,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// Largest message size.
    pub max_msg_sz: u32,
    /// Entries in the P_Key table.
    pub pkey_tbl_len: u16,
    /// LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
}

/// Address handle attributes (`ibv_ah_attr` with its GRH flattened in), also a connected QP's
/// primary path (`QpAttr::ah_attr`).
///
/// RoCE has no neighbour resolution here: the caller supplies the destination MAC (`dmac`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label (20 bits); RoCE v2 also derives the UDP source port from it.
    pub flow_label: u32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class (RoCE v2: DSCP in the upper 6 bits).
    pub traffic_class: u8,
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level (RoCE: Ethernet priority, `sl & 7`).
    pub sl: u8,
    /// Source path bits (InfiniBand).
    pub src_path_bits: u8,
    /// Static rate code (0 = port rate).
    pub static_rate: u8,
    /// A GRH is present (always so on RoCE).
    pub is_global: bool,
    /// Port number (1-based).
    pub port_num: u8,
    /// Destination MAC (RoCE).
    pub dmac: [u8; 6],
}

/// A raw range of device addresses to register (`Provider::reg_mr_raw`, which is `unsafe`:
/// safe code registers a [`Buffer`](crate::Buffer), which the memory region then owns).
///
/// A process without a kernel has nothing to pin and translate a virtual address range: the
/// memory an MR covers is memory the caller got from the platform's DMA allocator. `addr` is
/// the address SGEs and remote peers use for it (usually the buffer's IOVA); `pages` lists the
/// device addresses of the 4 KiB pages covering `[addr, addr + length)`, the first being the
/// page that holds `addr`. An empty `pages` means the range is device-contiguous at `addr`
/// itself. [`Buffer::region`](crate::Buffer::region) describes a buffer this way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemRegion<'a> {
    /// First address covered, as work requests name it.
    pub addr: u64,
    /// Length in bytes (not 0).
    pub length: u64,
    /// Device addresses of the 4 KiB pages, or empty for device-contiguous memory at `addr`.
    pub pages: &'a [u64],
}

/// Transport service type of a QP (`enum ibv_qp_type`, with its values). New types may be
/// added; a provider refuses a type it does not implement with
/// [`Error::NotSupported`](crate::Error::NotSupported) (EOPNOTSUPP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum QpType {
    /// `IBV_QPT_RC`.
    #[default]
    Rc = 2,
    /// `IBV_QPT_UD`.
    Ud = 4,
    /// The GSI QP (QP1) of a port: the kernel's `IB_QPT_GSI` (1). libibverbs has no user GSI
    /// type; on Linux the kernel's `ib_mad` layer owns QP1 and applications (librdmacm's
    /// connection manager included) reach it through `ib_umad`. There is no kernel here, so
    /// the connection manager creates it through this type. A datagram QP like UD (same
    /// modify-QP attributes, same work requests); the device gives it QP number 1, allows
    /// one per port, delivers to it only MADs carrying the GSI Q_Key 0x80010000 and sends
    /// with that Q_Key whatever the work request names. [`check_modify`](crate::check_modify)
    /// takes the UD attributes for it (the kernel's table takes no `PORT` for GSI: there the
    /// port is fixed at creation).
    Gsi = 1,
    /// AWS EFA's scalable reliable datagram: reliable (the device retransmits) but
    /// unordered delivery of messages of at most one MTU, no connection; every send work
    /// request names its destination (address handle, QPN, Q_Key) in
    /// [`SendWr::dest`](crate::SendWr::dest), and RDMA read/write name a remote buffer as
    /// well.
    ///
    /// The value is 0xff because libibverbs has no SRD type of its own: rdma-core creates an
    /// SRD QP as `IBV_QPT_DRIVER` (0xff) with EFA's driver QP type `EFA_QP_DRIVER_TYPE_SRD`
    /// (0) through `efadv_create_qp_ex`, and `ibv_qp.qp_type` of such a QP reads 0xff, so
    /// ported code comparing numbers sees the same one. (Should a second driver-specific
    /// type ever be added here, it gets its own variant and 0xff then no longer names SRD
    /// alone.)
    ///
    /// Modify-QP attributes as UD (Q_Key, SQ PSN), see
    /// [`check_modify`](crate::check_modify).
    Srd = 0xff,
}

/// QP state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    #[default]
    Reset = 0,
    /// `IBV_QPS_INIT`.
    Init = 1,
    /// `IBV_QPS_RTR`.
    Rtr = 2,
    /// `IBV_QPS_RTS`.
    Rts = 3,
    /// `IBV_QPS_SQD`.
    Sqd = 4,
    /// `IBV_QPS_SQE`.
    Sqe = 5,
    /// `IBV_QPS_ERR`.
    Err = 6,
}

/// Queue sizes of a QP (`ibv_qp_cap`): asked for at creation, the actual values reported back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Outstanding send work requests (of the largest size the other limits allow).
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter entries per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
}

/// QP creation attributes (`ibv_qp_init_attr`); `C` is the provider's CQ type, `S` its SRQ
/// type.
#[derive(Debug)]
pub struct QpInitAttr<'a, C, S> {
    /// Transport service.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a C,
    /// CQ for receive completions (may be the same CQ; with an SRQ, the CQ this QP's
    /// receive completions go to).
    pub recv_cq: &'a C,
    /// Shared receive queue the QP takes its receive work requests from (`None`: its own
    /// receive queue of `cap.max_recv_wr`). With an SRQ, `cap.max_recv_wr` and
    /// `cap.max_recv_sge` are ignored (reported back as 0) and `post_recv` on the QP is
    /// EINVAL; it must be on the PD the QP is created on (else EINVAL), and it cannot be
    /// destroyed while the QP exists (EBUSY).
    pub srq: Option<&'a S>,
    /// Sizes wanted.
    pub cap: QpCap,
    /// Every send work request generates a completion, SIGNALED or not.
    pub sq_sig_all: bool,
}

impl<C, S> Clone for QpInitAttr<'_, C, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C, S> Copy for QpInitAttr<'_, C, S> {}

/// Attributes of a shared receive queue (`ibv_srq_attr`): asked for at creation
/// (`ibv_srq_init_attr.attr`), the actual values reported back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Outstanding receive work requests (at least 1; the provider may give more).
    pub max_wr: u32,
    /// Scatter entries per receive work request (at least 1).
    pub max_sge: u32,
    /// Limit: when fewer work requests than this stay posted, the SRQ_LIMIT_REACHED
    /// asynchronous event is raised once (0: no limit event). At most `max_wr`.
    pub srq_limit: u32,
}

/// QP attributes (`ibv_qp_attr`): what [`check_modify`](crate::check_modify) and a provider's
/// `modify_qp` read (the fields the mask names) and `query_qp` fills.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// State to move to.
    pub qp_state: QpState,
    /// Current state (used with `QpAttrMask::CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU (RC).
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN (24 bits).
    pub rq_psn: u32,
    /// Send PSN (24 bits).
    pub sq_psn: u32,
    /// Remote QP number (RC, 24 bits).
    pub dest_qp_num: u32,
    /// Remote access the QP allows as responder.
    pub qp_access_flags: AccessFlags,
    /// Queue sizes (query only).
    pub cap: QpCap,
    /// Primary path (RC).
    pub ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// SQD asynchronous event wanted.
    pub en_sqd_async_notify: bool,
    /// Port (1-based).
    pub port_num: u8,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: u8,
    /// Local ACK timeout code (0..=31; 4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retry count (0..=7).
    pub retry_cnt: u8,
    /// RNR retry count (0..=7, 7 = infinite).
    pub rnr_retry: u8,
}
