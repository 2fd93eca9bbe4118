//! The CM context ([`Cm`]), its devices, the MAD QP of each device, and the progress engine.
//!
//! All state lives in one [`State`] behind a spin lock. Every public call takes the lock,
//! runs [`State::progress`] (which services every device and every id: received MADs,
//! retransmission timers, address resolution), does its work and lets go; a blocking call
//! repeats that with [`Platform::relax`] in between until its condition holds. So one thread
//! can run both ends of a connection: while it waits in one id's call, the engine answers
//! the other id's peer.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::{Ipv4Addr, SocketAddrV4};
use core::sync::atomic::AtomicU32;

use nic_hal::Platform;
use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Mtu, Provider, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr as VerbsQpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest,
    WcStatus, WorkCompletion, WrOpcode,
};

use crate::addr::PortSpace;
use crate::error::Error;
use crate::event::{Chan, EventParam, EventRec, EventType};
use crate::mad::{self, CmMad, CmMessage, GSI_QKEY, MadBytes, Req};
use crate::slab::{Key, Slab};

/// Q_Key of UD ids in the UDP and IB port spaces (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Tunables of a [`Cm`]. The defaults are Linux's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// CM response timeout exponent sent in REQs (4.096 µs × 2^t; 20 ≈ 4.3 s).
    pub cm_response_timeout: u8,
    /// REQ/REP/DREQ retransmissions before giving up (4 bits; 15).
    pub max_cm_retries: u8,
    /// Packet life time exponent of synthesised RoCE paths (16).
    pub packet_life_time: u8,
    /// The device's `max_qp_rd_atom` (the verbs device attributes do not carry it): what
    /// `rdma_connect(NULL)` offers as responder resources.
    pub max_qp_rd_atom: u8,
    /// The device's `max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: u8,
    /// Hop limit of synthesised paths.
    pub hop_limit: u8,
    /// Seed of the random communication IDs and PSNs.
    pub seed: u64,
    /// Receive buffers of each device's MAD QP (Linux's MAD layer: 512).
    pub mad_recv_slots: u16,
    /// Send buffers of each device's MAD QP (Linux's MAD layer: 128).
    pub mad_send_slots: u16,
    /// A blocking call gives up with ETIMEDOUT after this long (platform clock); `None`
    /// waits forever, as librdmacm does.
    pub wait_limit_ns: Option<u64>,
    /// Give each CQ an id creates a completion channel of its own, as librdmacm does (on
    /// by default). Off, those CQs have none and `get_*_comp` only polls: with providers
    /// whose channels are scarce device objects (an mlx5 channel is an EQ), two channels per
    /// connection limit a device to a few hundred connections at most.
    pub auto_comp_channels: bool,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            hop_limit: 64,
            seed: 0x5eed_0c0f_fee0_4c4d,
            mad_recv_slots: 512,
            mad_send_slots: 128,
            wait_limit_ns: None,
            auto_comp_channels: true,
        }
    }
}

/// What address resolution (ARP, here a table) knows of an IPv4 neighbour. Its connection
/// manager is reached at its GSI QP (QP1), as on any RoCE node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// Its Ethernet address.
    pub mac: [u8; 6],
}

/// A device of a [`Cm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId {
    cm: u32,
    pub(crate) key: Key,
}

/// What a [`Cm`] knows about one of its devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device.
    pub id: DeviceId,
    /// IPv4 address (from GID 0).
    pub ip: Ipv4Addr,
    /// GID 0.
    pub gid: Gid,
    /// Ethernet address.
    pub mac: [u8; 6],
    /// Node GUID used in CM messages (the EUI-64 of the MAC).
    pub guid: u64,
    /// QP number of the MAD QP: the GSI QP, so [`mad::GSI_QPN`] (1).
    pub cm_qpn: u32,
    /// Active MTU of port 1.
    pub active_mtu: Mtu,
}

/// A protection domain of a [`Cm`] device (an `ibv_pd` obtained from the CM's context; a PD
/// of another device, or of another `Cm`, is refused with EINVAL where librdmacm refuses a PD
/// of another `ibv_context`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CmPd {
    pub(crate) dev: DeviceId,
    pub(crate) key: Key,
}

impl CmPd {
    /// The device it belongs to.
    pub fn device(&self) -> DeviceId {
        self.dev
    }
}

/// Counters of the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs sent (including retransmissions).
    pub mads_sent: u64,
    /// MADs received.
    pub mads_received: u64,
    /// Retransmissions (REQ, REP, DREQ, SIDR_REQ).
    pub retransmits: u64,
    /// Received MADs that did not decode, or arrived in error.
    pub bad_mads: u64,
    /// MADs that could not be sent (no free buffer, no neighbour, post failure).
    pub send_failures: u64,
    /// REQs dropped because the listener's backlog was full.
    pub backlog_drops: u64,
}

// ------------------------------------------------------------------ internal records

pub(crate) struct PdRec<P: Provider> {
    pub pd: P::Pd,
    /// QPs and passive endpoints using it.
    pub users: u32,
}

const SLOT: usize = 512;
const GRH: usize = 40;
const SEND_BIT: u64 = 1 << 32;

/// The MAD QP of a device: its GSI QP (QP1, [`QpType::Gsi`]; on Linux the kernel's MAD layer
/// owns it), its CQ, and registered buffers: `recv` slots then `send` slots of 512 bytes.
/// MADs go to QP1 of the peer with the GSI Q_Key, P_Key index 0.
pub(crate) struct Gsi<P: Provider> {
    pub qp: P::Qp,
    cq: P::Cq,
    pd: P::Pd,
    mr: P::Mr,
    /// The slots (the MR holds another handle to them).
    buf: Buffer,
    recv_slots: u16,
    send_slots: u16,
    pub free_send: Vec<u16>,
    ahs: Vec<(Ipv4Addr, P::Ah)>,
}

pub(crate) struct Dev<P: Provider> {
    pub provider: P,
    pub ip: Ipv4Addr,
    pub gid: Gid,
    pub mac: [u8; 6],
    pub guid: u64,
    pub mtu: Mtu,
    pub agent: u32,
    pub pds: Slab<PdRec<P>>,
    pub default_pd: Option<Key>,
    /// Bound ids (each holds one reference; the default PD lives while there is one).
    pub refcnt: u32,
    pub gsi: Option<Gsi<P>>,
}

/// Auto-created CQ with its completion channel (none with
/// [`CmConfig::auto_comp_channels`] off).
pub(crate) struct AutoCq<P: Provider> {
    pub cq: P::Cq,
    pub channel: Option<P::CompChannel>,
}

pub(crate) struct QpRec<P: Provider> {
    pub qp: P::Qp,
    pub pd: Key,
    pub send_cq: Option<AutoCq<P>>,
    pub recv_cq: Option<AutoCq<P>>,
    /// The caller's CQs and SRQ the QP uses (held while it exists; never destroyed by the
    /// manager): the user send CQ, the user receive CQ, the SRQ (the caller's or the id's).
    pub user: UserObjs<P>,
}

/// Objects of the caller (or of the id, for its SRQ) a QP uses: shared handles, released
/// when the QP is gone.
pub(crate) struct UserObjs<P: Provider> {
    pub send_cq: Option<Arc<P::Cq>>,
    pub recv_cq: Option<Arc<P::Cq>>,
    pub srq: Option<Arc<P::Srq>>,
}

impl<P: Provider> Clone for UserObjs<P> {
    fn clone(&self) -> Self {
        UserObjs {
            send_cq: self.send_cq.clone(),
            recv_cq: self.recv_cq.clone(),
            srq: self.srq.clone(),
        }
    }
}

/// The SRQ of an id (`rdma_create_srq`), on PD `pd` of the id's device.
pub(crate) struct IdSrq<P: Provider> {
    pub srq: Arc<P::Srq>,
    pub pd: Key,
}

/// `qp_init_attr` saved by a passive endpoint for the QPs of its requests (with the user CQs
/// and SRQ it names, which every request's QP shares).
pub(crate) struct SavedAttr<P: Provider> {
    pub qp_type: QpType,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub user: UserObjs<P>,
}

impl<P: Provider> Clone for SavedAttr<P> {
    fn clone(&self) -> Self {
        SavedAttr {
            qp_type: self.qp_type,
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
            user: self.user.clone(),
        }
    }
}

/// The rdma_cm id states (kernel `enum rdma_cm_state` plus the IB CM states that matter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fsm {
    Idle,
    AddrQuery,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// Active: REQ (or SIDR_REQ) sent.
    ReqSent,
    /// Active, no QP: REP arrived, waiting for `establish`.
    RepRcvd,
    /// Passive: REQ (or SIDR_REQ) arrived, waiting for accept / reject.
    ReqRcvd,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    Established,
    DreqSent,
    DreqRcvd,
    Disconnected,
    /// Rejected, unreachable or failed: the app must destroy the id.
    Closed,
}

/// A synthesised RoCE path.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Route {
    pub sgid: Gid,
    pub dgid: Gid,
    pub dmac: [u8; 6],
    pub mtu: Mtu,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub traffic_class: u8,
    pub sl: u8,
    pub local_ack_timeout: u8,
}

impl Route {
    pub fn ah_attr(&self) -> AhAttr {
        AhAttr {
            dgid: self.dgid,
            flow_label: self.flow_label,
            sgid_index: 0,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            sl: self.sl,
            is_global: true,
            port_num: 1,
            dmac: self.dmac,
            ..AhAttr::default()
        }
    }
}

/// Where a MAD goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub ip: Ipv4Addr,
    pub mac: [u8; 6],
    pub qpn: u32,
}

impl Default for Peer {
    fn default() -> Self {
        Peer {
            ip: Ipv4Addr::UNSPECIFIED,
            mac: [0; 6],
            qpn: 0,
        }
    }
}

/// A MAD waiting for its answer.
pub(crate) struct Retx {
    pub mad: Box<MadBytes>,
    pub deadline: u64,
    pub timeout_ns: u64,
    pub tries_left: u8,
}

/// Protocol state of a connection.
#[derive(Default)]
pub(crate) struct Conn {
    pub active: bool,
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// TID of the REQ (REP/RTU/REJ reuse it).
    pub tid: u64,
    /// TID of the DREQ received (the DREP echoes it).
    pub dreq_tid: u64,
    pub peer: Peer,
    pub remote_qpn: u32,
    /// PSN we expect to receive (sent in our REQ / REP).
    pub local_psn: u32,
    /// The peer's starting PSN (our send PSN).
    pub remote_psn: u32,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub flow_control: bool,
    /// The REQ received (passive).
    pub req: Option<Box<Req>>,
    pub retx: Option<Retx>,
    /// The last reply sent without retransmission (RTU, DREP, REJ), for duplicates.
    pub last_reply: Option<Box<MadBytes>>,
    /// The service ID of the SIDR_REQ answered (the SIDR_REP repeats it).
    pub sidr_service_id: u64,
    /// The REP's initiator depth and responder resources (active side).
    pub peer_initiator_depth: u8,
    pub peer_responder_resources: u8,
    pub peer_rnr_retry: u8,
}

pub(crate) struct IdState<P: Provider> {
    pub ps: PortSpace,
    pub qp_type: QpType,
    pub context: u64,
    pub chan: Key,
    pub sync: bool,
    pub dev: Option<Key>,
    pub pd: Option<Key>,
    pub has_dev_ref: bool,
    pub src: Option<SocketAddrV4>,
    pub dst: Option<SocketAddrV4>,
    pub port_reserved: bool,
    pub fsm: Fsm,
    pub route: Option<Route>,
    /// Device chosen for an address resolution in progress.
    pub resolve_dev: Option<Key>,
    pub addr_deadline: u64,
    pub peer: Option<Neighbor>,
    pub qp: Option<QpRec<P>>,
    /// The id's SRQ (`id->srq`).
    pub srq: Option<IdSrq<P>>,
    pub saved: Option<SavedAttr<P>>,
    /// A user PD (device, PD) given to a passive `create_ep` (used by `get_request`).
    pub saved_pd: Option<(Key, Key)>,
    pub backlog: u32,
    pub queued_requests: u32,
    pub listener: Option<Key>,
    pub conn: Conn,
    /// The last event of a synchronous call (`id->event`).
    pub last_event: Option<EventRec>,
    /// The application holds a handle (false for a request id not yet delivered).
    pub owned: bool,
    /// Remembered `initiator_depth` / `responder_resources` (librdmacm's).
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// A QP transition after the REP failed: later REJECTED/DISCONNECTED are swallowed.
    pub connect_error: bool,
    /// `RDMA_OPTION_ID_TOS`: traffic class of the paths resolved afterwards.
    pub tos: Option<u8>,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuseaddr: bool,
    /// `RDMA_OPTION_ID_AFONLY` (stored; the stack is IPv4-only).
    pub afonly: bool,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's RTS `timeout`.
    pub ack_timeout: Option<u8>,
    /// End of the IB CM timewait the id is in (after DISCONNECTED).
    pub timewait_until: Option<u64>,
}

impl<P: Provider> IdState<P> {
    /// The id's path as its QP's RTR/RTS transitions use it: the ACK-timeout option, if set,
    /// replaces the computed local ACK timeout (the kernel's `rdma_init_qp_attr`).
    pub(crate) fn rts_route(&self) -> Route {
        let mut r = self.route.unwrap_or_default();
        if let Some(t) = self.ack_timeout {
            r.local_ack_timeout = t;
        }
        r
    }
}

/// A retransmission that outlived its id (a DREQ sent by a destroy).
pub(crate) struct Orphan {
    pub dev: Key,
    peer: Peer,
    local_comm_id: u32,
    retx: Retx,
}

/// Random numbers for communication IDs and PSNs (xorshift64*).
pub(crate) struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn psn(&mut self) -> u32 {
        (self.next() >> 40) as u32 & 0xFF_FFFF
    }
}

pub(crate) struct State<P: Provider> {
    pub cfg: CmConfig,
    pub now: u64,
    pub cm_uid: u32,
    pub devs: Slab<Dev<P>>,
    pub ids: Slab<IdState<P>>,
    pub chans: Slab<Chan>,
    pub neighbors: Vec<(Ipv4Addr, Neighbor)>,
    pub orphans: Vec<Orphan>,
    /// Received MADs not yet dispatched.
    rx: Vec<Received>,
    pub rng: Rng,
    comm_id_seq: u32,
    comm_id_mask: u32,
    eph_cursor: u16,
    pub stats: CmStats,
}

pub(crate) struct Shared<P: Provider> {
    pub platform: Box<dyn Platform + Send + Sync>,
    pub st: spin::Mutex<State<P>>,
}

/// The connection manager of one program: its RDMA devices, ids and event channels
/// (librdmacm's process-wide state). Cloning gives another handle to the same manager.
pub struct Cm<P: Provider> {
    pub(crate) sh: Arc<Shared<P>>,
}

impl<P: Provider> Clone for Cm<P> {
    fn clone(&self) -> Self {
        Cm {
            sh: self.sh.clone(),
        }
    }
}

pub(crate) static NEXT_CM: AtomicU32 = AtomicU32::new(1);

/// 4.096 µs × 2^exp, in ns.
pub(crate) const fn ib_time_ns(exp: u8) -> u64 {
    4096u64 << (exp as u32 & 31)
}

/// EUI-64 node GUID of a MAC.
pub(crate) const fn guid_of(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xFF,
        0xFE,
        mac[3],
        mac[4],
        mac[5],
    ])
}

pub(crate) fn mtu_from_code(c: u8) -> Option<Mtu> {
    Some(match c {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// A zero-padded copy of `data` in an array of `N` bytes (`data.len() <= N` checked by the
/// caller).
pub(crate) fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = data.len().min(N);
    a[..n].copy_from_slice(&data[..n]);
    a
}

/// A wildcard address, or a loopback address no device has: rdma_cm's "any" addresses, which
/// bind no device.
fn is_any(ip: Ipv4Addr, dev_ips: &[Ipv4Addr]) -> bool {
    ip.is_unspecified() || (ip.is_loopback() && !dev_ips.contains(&ip))
}

// ------------------------------------------------------------------ QP transitions

/// RESET → INIT of a connected QP, or RESET → INIT → RTR → RTS of a UD (or the GSI) QP.
pub(crate) fn qp_init<P: Provider>(
    p: &P,
    qp: &mut P::Qp,
    qp_type: QpType,
    access: AccessFlags,
    qkey: u32,
) -> Result<(), Error> {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: access,
        qkey,
        ..QpAttr::default()
    };
    match qp_type {
        QpType::Rc => {
            p.modify_qp(qp, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)?;
        }
        QpType::Ud | QpType::Gsi => {
            p.modify_qp(qp, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)?;
            a.qp_state = QpState::Rtr;
            p.modify_qp(qp, &a, M::STATE)?;
            a.qp_state = QpState::Rts;
            a.sq_psn = 0;
            p.modify_qp(qp, &a, M::STATE | M::SQ_PSN)?;
        }
        // Types the manager does not bring up (SRD has no rdma_cm).
        _ => return Err(Error::NotSupported),
    }
    Ok(())
}

/// Moves a QP to ERR (flushing its work requests); errors are ignored (the QP may already
/// be there).
pub(crate) fn qp_to_err<P: Provider>(p: &P, qp: &mut P::Qp) {
    let a = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let _ = p.modify_qp(qp, &a, M::STATE);
}

/// INIT → RTR → RTS of a connected QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Connect {
    pub route: Route,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub max_rd_atomic: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub access: AccessFlags,
}

/// The attributes (and mask) of the INIT → RTR transition of a connection.
pub(crate) fn rtr_attr(c: &Connect) -> (QpAttr, M) {
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: c.route.ah_attr(),
        path_mtu: c.route.mtu,
        dest_qp_num: c.dest_qpn & 0xFF_FFFF,
        rq_psn: c.rq_psn,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: 0,
        qp_access_flags: c.access,
        ..QpAttr::default()
    };
    let m = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER
        | M::ACCESS_FLAGS;
    (a, m)
}

/// The attributes (and mask) of the RTR → RTS transition of a connection.
pub(crate) fn rts_attr(c: &Connect) -> (QpAttr, M) {
    let a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: c.sq_psn,
        timeout: c.route.local_ack_timeout,
        retry_cnt: c.retry_cnt.min(7),
        rnr_retry: c.rnr_retry.min(7),
        max_rd_atomic: c.max_rd_atomic,
        ..QpAttr::default()
    };
    let m = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    (a, m)
}

pub(crate) fn qp_rtr_rts<P: Provider>(p: &P, qp: &mut P::Qp, c: &Connect) -> Result<(), Error> {
    let (a, m) = rtr_attr(c);
    p.modify_qp(qp, &a, m)?;
    let (a, m) = rts_attr(c);
    p.modify_qp(qp, &a, m)?;
    Ok(())
}

/// The responder access rdma_cm gives a connected QP: remote write, plus read and atomics
/// when it accepts RDMA reads (responder resources > 0).
pub(crate) fn cm_access(responder_resources: u8) -> AccessFlags {
    if responder_resources > 0 {
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
    } else {
        AccessFlags::REMOTE_WRITE
    }
}

// ------------------------------------------------------------------ the device MAD QP

impl<P: Provider> Gsi<P> {
    pub(crate) fn create(p: &P, recv_slots: u16, send_slots: u16) -> Result<Gsi<P>, Error> {
        let (recv_slots, send_slots) = (recv_slots.max(1), send_slots.max(1));
        let total = recv_slots as usize + send_slots as usize;
        let pd = p.alloc_pd()?;
        let made = (|| {
            let cq = p.create_cq(total as u32 + 1, 0, None)?;
            let buf = match p.alloc_buf(total * SLOT) {
                Ok(b) => b,
                Err(e) => {
                    let _ = p.destroy_cq(cq);
                    return Err(e.into());
                }
            };
            // (On the failure paths below, a failed `dereg_mr` leaves the memory with the
            // MR, which keeps it: dropping `buf` then frees nothing the device can reach.)
            let mr = match p.reg_mr(&pd, buf.clone(), AccessFlags::LOCAL_WRITE) {
                Ok(m) => m,
                Err(e) => {
                    let _ = p.destroy_cq(cq);
                    return Err(e.into());
                }
            };
            let qp = p.create_qp(
                &pd,
                &VerbsQpInitAttr {
                    qp_type: QpType::Gsi,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: send_slots as u32,
                        max_recv_wr: recv_slots as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: true,
                },
            );
            let mut qp = match qp {
                Ok((qp, _)) => qp,
                Err(e) => {
                    let _ = p.dereg_mr(mr);
                    let _ = p.destroy_cq(cq);
                    return Err(e.into());
                }
            };
            if let Err(e) = qp_init(p, &mut qp, QpType::Gsi, AccessFlags::empty(), GSI_QKEY) {
                let _ = p.destroy_qp(qp);
                let _ = p.dereg_mr(mr);
                let _ = p.destroy_cq(cq);
                return Err(e);
            }
            Ok((cq, buf, mr, qp))
        })();
        let (cq, buf, mr, qp) = match made {
            Ok(v) => v,
            Err(e) => {
                let _ = p.dealloc_pd(pd);
                return Err(e);
            }
        };
        let mut g = Gsi {
            qp,
            cq,
            pd,
            mr,
            buf,
            recv_slots,
            send_slots,
            free_send: (0..send_slots).rev().collect(),
            ahs: Vec::new(),
        };
        for s in 0..recv_slots {
            if let Err(e) = g.post_recv(p, s) {
                g.destroy(p);
                return Err(e);
            }
        }
        Ok(g)
    }

    fn slot_addr(&self, slot: u32) -> u64 {
        self.buf.addr() + slot as u64 * SLOT as u64
    }

    fn post_recv(&mut self, p: &P, slot: u16) -> Result<(), Error> {
        let sge = [Sge {
            addr: self.slot_addr(slot as u32),
            length: (GRH + mad::MAD_SIZE) as u32,
            lkey: self.mr.lkey(),
        }];
        p.post_recv(
            &mut self.qp,
            &[RecvWr {
                wr_id: slot as u64,
                sg_list: &sge,
            }],
        )?;
        Ok(())
    }

    pub(crate) fn send(&mut self, p: &P, to: &Peer, bytes: &MadBytes) -> bool {
        let Some(slot) = self.free_send.pop() else {
            return false;
        };
        let at = self.recv_slots as u32 + slot as u32;
        let off = at as usize * SLOT;
        if self.buf.write(off, bytes).is_err() {
            self.free_send.push(slot);
            return false;
        }
        if !self.ahs.iter().any(|(ip, _)| *ip == to.ip) {
            let attr = AhAttr {
                dgid: Gid::from_ipv4(to.ip.octets()),
                sgid_index: 0,
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                dmac: to.mac,
                ..AhAttr::default()
            };
            match p.create_ah(&self.pd, &attr) {
                Ok(ah) => self.ahs.push((to.ip, ah)),
                Err(_) => {
                    self.free_send.push(slot);
                    return false;
                }
            }
        }
        let Some((_, ah)) = self.ahs.iter().find(|(ip, _)| *ip == to.ip) else {
            self.free_send.push(slot);
            return false;
        };
        let sge = [Sge {
            addr: self.slot_addr(at),
            length: mad::MAD_SIZE as u32,
            lkey: self.mr.lkey(),
        }];
        let wr = SendWr {
            wr_id: SEND_BIT | slot as u64,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            dest: Some(UdDest {
                ah,
                remote_qpn: to.qpn,
                remote_qkey: GSI_QKEY,
            }),
            ..SendWr::default()
        };
        if p.post_send(&mut self.qp, &[wr]).is_err() {
            self.free_send.push(slot);
            return false;
        }
        true
    }

    /// Polls the CQ: frees send buffers, returns received MADs as (source IP, source QPN,
    /// bytes), reposting their buffers; `bad` counts receives in error.
    pub(crate) fn poll(&mut self, p: &P, d: Key, out: &mut Vec<Received>, bad: &mut u64) {
        let mut wc = [WorkCompletion::default(); 16];
        loop {
            let n = match p.poll_cq(&self.cq, &mut wc) {
                Ok(n) => n,
                Err(_) => {
                    *bad += 1;
                    0
                }
            };
            for w in &wc[..n] {
                if w.wr_id & SEND_BIT != 0 {
                    let slot = (w.wr_id & 0xFFFF) as u16;
                    // a completion for a buffer that is not out is the device's error
                    if slot >= self.send_slots || self.free_send.contains(&slot) {
                        *bad += 1;
                    } else {
                        self.free_send.push(slot);
                    }
                    continue;
                }
                let Ok(slot) = u16::try_from(w.wr_id) else {
                    *bad += 1;
                    continue;
                };
                if slot >= self.recv_slots {
                    *bad += 1;
                    continue;
                }
                if w.status != WcStatus::Success {
                    // the QP is in error: the buffer is not reposted
                    *bad += 1;
                    continue;
                }
                let mut m = [0u8; GRH + mad::MAD_SIZE];
                let ok = w.byte_len as usize >= m.len()
                    && self.buf.read(slot as usize * SLOT, &mut m).is_ok();
                let _ = self.post_recv(p, slot);
                if !ok {
                    *bad += 1;
                    continue;
                }
                let Some(src) = grh_source(&m[..GRH]) else {
                    *bad += 1;
                    continue;
                };
                let mut b = Box::new([0u8; mad::MAD_SIZE]);
                b.copy_from_slice(&m[GRH..]);
                out.push(Received {
                    dev: d,
                    src,
                    src_qp: w.src_qp,
                    bytes: b,
                });
            }
            if n < wc.len() {
                break;
            }
        }
    }

    pub(crate) fn destroy(self, p: &P) {
        let Gsi {
            qp,
            cq,
            pd,
            mr,
            buf,
            ahs,
            ..
        } = self;
        for (_, ah) in ahs {
            let _ = p.destroy_ah(ah);
        }
        // Teardown goes on whatever fails (there is no one to report to), but memory the
        // device may still use is never freed.
        let qp_gone = p.destroy_qp(qp).is_ok();
        // A failed dereg keeps (or leaks) the MR's own handle to the slots.
        let _ = p.dereg_mr(mr);
        let _ = p.destroy_cq(cq);
        let _ = p.dealloc_pd(pd);
        if qp_gone {
            drop(buf);
        } else {
            // The QP may still exist with receives posted into the slots (and sends reading
            // them): leak the memory rather than free it under the device.
            core::mem::forget(buf);
        }
    }
}

/// A MAD received on a device.
pub(crate) struct Received {
    dev: Key,
    src: Ipv4Addr,
    src_qp: u32,
    bytes: Box<MadBytes>,
}

/// The source IPv4 address of a UD receive's 40-byte GRH area: RoCEv2 over IPv4 puts the
/// IPv4 header in its last 20 bytes; a real GRH (IP version 6) has the source GID at 8.
fn grh_source(g: &[u8]) -> Option<Ipv4Addr> {
    if g.len() < GRH {
        return None;
    }
    if g[20] >> 4 == 4 {
        return Some(Ipv4Addr::new(g[32], g[33], g[34], g[35]));
    }
    if g[0] >> 4 == 6 {
        let mut s = [0u8; 16];
        s.copy_from_slice(&g[8..24]);
        return Gid(s).ipv4().map(Ipv4Addr::from);
    }
    None
}

// ------------------------------------------------------------------ state: devices, ids, events

impl<P: Provider> State<P> {
    pub(crate) fn new(cfg: CmConfig, cm_uid: u32) -> State<P> {
        let mut rng = Rng(cfg.seed | 1);
        let comm_id_mask = rng.next() as u32;
        let eph_cursor = (rng.next() % 28232) as u16;
        State {
            cfg,
            now: 0,
            cm_uid,
            devs: Slab::default(),
            ids: Slab::default(),
            chans: Slab::default(),
            neighbors: Vec::new(),
            orphans: Vec::new(),
            rx: Vec::new(),
            rng,
            comm_id_seq: 0,
            comm_id_mask,
            eph_cursor,
            stats: CmStats::default(),
        }
    }

    pub fn device_id(&self, key: Key) -> DeviceId {
        DeviceId {
            cm: self.cm_uid,
            key,
        }
    }

    /// The key of a device id of this manager.
    pub fn dev_key(&self, d: DeviceId) -> Option<Key> {
        (d.cm == self.cm_uid && self.devs.contains(d.key)).then_some(d.key)
    }

    pub fn neighbor(&self, ip: Ipv4Addr) -> Option<Neighbor> {
        self.neighbors
            .iter()
            .find(|(i, _)| *i == ip)
            .map(|(_, n)| *n)
    }

    /// The peer at `ip` (its MAC from the neighbour table) on QP `qpn`, if it is known.
    pub(crate) fn peer(&self, ip: Ipv4Addr, qpn: u32) -> Option<Peer> {
        self.neighbor(ip).map(|nb| Peer {
            ip,
            mac: nb.mac,
            qpn,
        })
    }

    pub(crate) fn dev_ips(&self) -> Vec<Ipv4Addr> {
        self.devs.iter().map(|(_, d)| d.ip).collect()
    }

    pub fn dev_by_ip(&self, ip: Ipv4Addr) -> Option<Key> {
        self.devs.iter().find(|(_, d)| d.ip == ip).map(|(k, _)| k)
    }

    pub(crate) fn next_comm_id(&mut self) -> u32 {
        loop {
            self.comm_id_seq = self.comm_id_seq.wrapping_add(1);
            let id = self.comm_id_seq ^ self.comm_id_mask;
            if id != 0 && !self.ids.iter().any(|(_, s)| s.conn.local_comm_id == id) {
                return id;
            }
        }
    }

    /// Binds an id to a device: one reference, the default PD allocated if needed.
    pub fn acquire_dev(&mut self, id: Key, d: Key) -> Result<(), Error> {
        let dev = self.devs.get_mut(d).ok_or(Error::NoDevice)?;
        if dev.default_pd.is_none() {
            let pd = dev.provider.alloc_pd()?;
            dev.default_pd = Some(dev.pds.insert(PdRec { pd, users: 0 }));
        }
        dev.refcnt += 1;
        let pd = dev.default_pd;
        let s = self.ids.get_mut(id).ok_or(Error::InvalidArgument)?;
        s.dev = Some(d);
        s.pd = pd;
        s.has_dev_ref = true;
        Ok(())
    }

    /// Drops an id's device reference; the last one frees the default PD (an EBUSY from the
    /// provider, MRs still registered on it, leaves it allocated but no longer default, as
    /// librdmacm drops it).
    pub(crate) fn release_dev(&mut self, id: Key) {
        let Some(s) = self.ids.get_mut(id) else {
            return;
        };
        if !s.has_dev_ref {
            return;
        }
        s.has_dev_ref = false;
        let Some(d) = s.dev else { return };
        let Some(dev) = self.devs.get_mut(d) else {
            return;
        };
        dev.refcnt = dev.refcnt.saturating_sub(1);
        if dev.refcnt == 0
            && let Some(k) = dev.default_pd.take()
            && dev.pds.get(k).is_some_and(|r| r.users == 0)
            && let Some(rec) = dev.pds.remove(k)
            && let Err(e) = dev.provider.dealloc_pd(rec.pd)
            && let Some(pd) = e.object
        {
            dev.pds.insert(PdRec { pd, users: 0 });
        }
    }

    pub fn new_id(
        &mut self,
        chan: Key,
        sync: bool,
        context: u64,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Key {
        self.ids.insert(IdState {
            ps,
            qp_type,
            context,
            chan,
            sync,
            dev: None,
            pd: None,
            has_dev_ref: false,
            src: None,
            dst: None,
            port_reserved: false,
            fsm: Fsm::Idle,
            route: None,
            resolve_dev: None,
            addr_deadline: 0,
            peer: None,
            qp: None,
            srq: None,
            saved: None,
            saved_pd: None,
            backlog: 0,
            queued_requests: 0,
            listener: None,
            conn: Conn::default(),
            last_event: None,
            owned: true,
            initiator_depth: 0,
            responder_resources: 0,
            connect_error: false,
            tos: None,
            reuseaddr: false,
            afonly: false,
            ack_timeout: None,
            timewait_until: None,
        })
    }

    /// Queues an event on the id's channel (a connection request: on the listener's).
    pub fn push_event(
        &mut self,
        id: Key,
        ty: EventType,
        status: i32,
        param: EventParam,
        listen: Option<Key>,
    ) {
        let chan_owner = listen.unwrap_or(id);
        let Some(ch) = self.ids.get(chan_owner).map(|s| s.chan) else {
            return;
        };
        if let Some(c) = self.chans.get_mut(ch) {
            c.queue.push_back(EventRec {
                ty,
                status,
                id,
                listen,
                param,
            });
        }
    }

    // -------------------------------------------------------------- ports

    /// A bind of `(ps, ip, port)` conflicts with another id's (the kernel's
    /// `cma_check_port`): skipped are `skip` and, when `reuse` is on, ids that set
    /// REUSEADDR too; a wildcard on either side is EADDRNOTAVAIL, the same address EADDRINUSE.
    pub(crate) fn port_conflict(
        &self,
        ps: PortSpace,
        ip: Ipv4Addr,
        port: u16,
        reuse: bool,
        skip: Option<Key>,
    ) -> Option<Error> {
        let ips = self.dev_ips();
        for (k, s) in self.ids.iter() {
            let Some(src) = s.src else { continue };
            if !s.port_reserved || s.ps != ps || src.port() != port || Some(k) == skip {
                continue;
            }
            if reuse && s.reuseaddr {
                continue;
            }
            let other = *src.ip();
            let any = is_any(ip, &ips) || is_any(other, &ips);
            if other == ip && !any {
                return Some(Error::AddrInUse);
            }
            if any {
                return Some(Error::AddrNotAvailable);
            }
        }
        None
    }

    pub(crate) fn ephemeral_port(&mut self, ps: PortSpace, ip: Ipv4Addr) -> Result<u16, Error> {
        const LO: u16 = 32768;
        const N: u16 = 60999 - LO + 1;
        for _ in 0..N {
            self.eph_cursor = (self.eph_cursor + 1) % N;
            let port = LO + self.eph_cursor;
            if self.port_conflict(ps, ip, port, false, None).is_none() {
                return Ok(port);
            }
        }
        Err(Error::AddrNotAvailable)
    }

    /// `rdma_bind_addr` (IPv4).
    pub fn bind(&mut self, id: Key, addr: SocketAddrV4) -> Result<(), Error> {
        let s = self.ids.get(id).ok_or(Error::InvalidArgument)?;
        if s.fsm != Fsm::Idle {
            return Err(Error::InvalidArgument);
        }
        let ps = s.ps;
        let reuse = s.reuseaddr;
        let ip = *addr.ip();
        let dev = self.dev_by_ip(ip);
        if dev.is_none() && !ip.is_unspecified() && !ip.is_loopback() {
            return Err(Error::AddrNotAvailable);
        }
        let port = if addr.port() == 0 {
            self.ephemeral_port(ps, ip)?
        } else {
            if let Some(e) = self.port_conflict(ps, ip, addr.port(), reuse, Some(id)) {
                return Err(e);
            }
            addr.port()
        };
        if let Some(s) = self.ids.get_mut(id) {
            s.src = Some(SocketAddrV4::new(ip, port));
            s.port_reserved = true;
            s.fsm = Fsm::AddrBound;
        }
        match dev {
            Some(d) => self.acquire_dev(id, d),
            None => Ok(()),
        }
    }

    // -------------------------------------------------------------- MAD sending

    pub(crate) fn send_to(&mut self, d: Key, to: &Peer, mad: &MadBytes) {
        let mut bad = 0;
        let ok = match self.devs.get_mut(d) {
            Some(dev) => match dev.gsi.as_mut() {
                Some(g) => {
                    if g.free_send.is_empty() {
                        // reap send completions; what arrived meanwhile waits in `rx`
                        g.poll(&dev.provider, d, &mut self.rx, &mut bad);
                    }
                    g.send(&dev.provider, to, mad)
                }
                None => false,
            },
            None => false,
        };
        self.stats.bad_mads += bad;
        if ok {
            self.stats.mads_sent += 1;
        } else {
            self.stats.send_failures += 1;
        }
    }

    pub(crate) fn tid(&self, d: Key, comm_id: u32) -> u64 {
        let agent = self.devs.get(d).map_or(0, |x| x.agent);
        (agent as u64) << 32 | comm_id as u64
    }

    /// Sends `msg` for id `k` to its peer; with `retx`, arms the retransmission timer with
    /// `timeout_ns` and `retries`.
    pub(crate) fn send_for(&mut self, k: Key, tid: u64, msg: CmMessage, retx: Option<(u64, u8)>) {
        let Some(s) = self.ids.get(k) else { return };
        let Some(d) = s.dev else { return };
        let peer = s.conn.peer;
        let bytes = CmMad {
            tid,
            attr_mod: 0,
            msg,
        }
        .encode();
        self.send_to(d, &peer, &bytes);
        let now = self.now;
        if let Some(s) = self.ids.get_mut(k) {
            match retx {
                Some((timeout_ns, tries)) => {
                    s.conn.retx = Some(Retx {
                        mad: Box::new(bytes),
                        deadline: now + timeout_ns,
                        timeout_ns,
                        tries_left: tries,
                    })
                }
                None => s.conn.last_reply = Some(Box::new(bytes)),
            }
        }
    }

    pub(crate) fn cm_timeout_ns(&self, exp: u8) -> u64 {
        ib_time_ns(exp) + 2 * ib_time_ns(self.cfg.packet_life_time)
    }

    pub(crate) fn push_orphan(&mut self, dev: Key, peer: Peer, local_comm_id: u32, retx: Retx) {
        self.orphans.push(Orphan {
            dev,
            peer,
            local_comm_id,
            retx,
        });
    }

    /// A DREP answered an orphaned DREQ.
    pub(crate) fn orphans_drop(&mut self, local_comm_id: u32) {
        self.orphans.retain(|o| o.local_comm_id != local_comm_id);
    }

    pub(crate) fn orphan_timers(&mut self) {
        let now = self.now;
        let mut resend = Vec::new();
        self.orphans.retain_mut(|o| {
            if o.retx.deadline > now {
                return true;
            }
            if o.retx.tries_left == 0 {
                return false;
            }
            o.retx.tries_left -= 1;
            o.retx.deadline = now + o.retx.timeout_ns;
            resend.push((o.dev, o.peer, *o.retx.mad));
            true
        });
        for (d, peer, bytes) in resend {
            self.stats.retransmits += 1;
            self.send_to(d, &peer, &bytes);
        }
    }

    // -------------------------------------------------------------- progress

    /// Services every device and id once.
    pub fn progress(&mut self) {
        let mut bad = 0;
        for k in self.devs.keys() {
            if let Some(dev) = self.devs.get_mut(k)
                && let Some(g) = dev.gsi.as_mut()
            {
                g.poll(&dev.provider, k, &mut self.rx, &mut bad);
            }
        }
        self.stats.bad_mads += bad;
        let got = core::mem::take(&mut self.rx);
        self.stats.mads_received += got.len() as u64;
        for r in got {
            self.on_mad(r.dev, r.src, r.src_qp, &r.bytes);
        }
        self.timers();
    }
}
