//! The embedded mode's fixture: two emulated NICs on one in-process fabric, each driven
//! through the verbs [`Provider`] trait, with one QP per lane each, connected to the other by
//! hand (the two-process mode has the connection manager do it):
//!
//! - ConnectX (`--device emu`): the mlx5 driver, RC QPs on a RoCEv2 fabric, RESET -> INIT ->
//!   RTR -> RTS with the peer's QPN, PSN, GID and MAC;
//! - EFA (`--device efa`): the EFA driver (BAR2 mapped, as a real one is), SRD QPs (RESET ->
//!   INIT with the Q_Key [`SRD_QKEY`] -> RTR -> RTS, RNR retry for ever where the device
//!   allows it) and, per lane end, an AH for the peer's GID: every send names the AH, the
//!   peer's QPN and the Q_Key. No atomics (EFA has none), inline data clamped to the
//!   device's `max_inline_data`, SENDs of at most the MTU.
//!
//! Each NIC registers one buffer laid out as `[SRC region | DST region]`; a region holds
//! `slots` message-sized slots. Requests gather from SRC and land in the peer's DST (READs
//! the other way round), so what arrived can be compared with what was sent after the run.
//! The client NIC runs the loops of [`crate::lat`] and [`crate::bw`]; the server NIC is their
//! far end ([`Near`]), a [`Responder`] driven from the same thread.

// Without the emulator only the two-process mode is built: the embedded fixture (and what only
// it uses) is left out.
#![cfg_attr(not(feature = "emulator"), allow(unused_imports, dead_code))]

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use device_open::Device;
#[cfg(feature = "emulator")]
use device_open::{EfaInProcess, InProcess, Open};
#[cfg(feature = "emulator")]
use nic_emulator::Profile;
#[cfg(feature = "emulator")]
use nic_testbed::World;
use verbs::{
    AccessFlags, AhAttr, AtomicCap, Gid, MemoryRegion, Mtu, PostError, Provider, QpAttr,
    QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, Sge, UdDest, WcStatus, WorkCompletion,
};

use crate::cli::Test;
use crate::port::{Buffer, Pace, Port, Request, Wait};
use crate::serve::{Peer, Responder, Verdict};

#[cfg(feature = "emulator")]
/// Port address of the client (requester) NIC.
pub const IP_CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
#[cfg(feature = "emulator")]
/// Port address of the server (responder) NIC.
pub const IP_SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
#[cfg(feature = "emulator")]
/// Seed of the fabric (no faults are configured; the seed only fixes the run).
const WORLD_SEED: u64 = 0x0072_7065_7266;
/// A wait fails when the virtual clock moved this far without the awaited progress (RC
/// retransmission gives up long before: 7 retries of a 67 ms timeout).
pub const STALL_LIMIT_NS: u64 = 30_000_000_000;
/// Most outstanding RDMA READs / atomics a requester asks for (perftest's default on mlx5).
pub const MAX_RD_ATOMIC: u8 = 16;

/// What went wrong during a run.
#[derive(Debug)]
pub enum Error {
    /// A verbs call failed.
    Verbs {
        /// The operation.
        what: &'static str,
        /// The verbs error.
        err: verbs::Error,
    },
    /// Posting failed.
    Post {
        /// The operation.
        what: &'static str,
        /// The error and the first request not posted.
        err: PostError,
    },
    /// A DMA buffer access or allocation failed.
    Dma {
        /// The operation.
        what: &'static str,
        /// The error.
        err: verbs::Error,
    },
    /// A work completion with an error status, or one that is not what was posted.
    Completion {
        /// What was expected.
        what: &'static str,
        /// The completion.
        wc: WorkCompletion,
    },
    /// Something the run checks did not hold.
    Check(String),
    /// Nothing moved for [`STALL_LIMIT_NS`] of virtual time (or [`STALL_LIMIT_WALL`]).
    Stalled {
        /// What was awaited.
        what: &'static str,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Verbs { what, err } => write!(f, "{what}: {err}"),
            Error::Post { what, err } => {
                write!(f, "{what}: {} (request {})", err.error, err.bad_wr)
            }
            Error::Dma { what, err } => write!(f, "{what}: DMA error {err:?}"),
            Error::Completion { what, wc } => write!(
                f,
                "{what}: completion wr_id {} status {:?} opcode {:?} byte_len {} vendor_err {:#x}",
                wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.vendor_err
            ),
            Error::Check(m) => f.write_str(m),
            Error::Stalled { what } => write!(
                f,
                "{what}: no progress for {} s of virtual time or {} s of wall-clock time",
                STALL_LIMIT_NS / 1_000_000_000,
                STALL_LIMIT_WALL.as_secs()
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Result of a run step.
pub type Result<T> = std::result::Result<T, Error>;

fn verbs_err(what: &'static str) -> impl FnOnce(verbs::Error) -> Error {
    move |err| Error::Verbs { what, err }
}

/// The error of a refused post.
pub fn post_err(what: &'static str) -> impl FnOnce(PostError) -> Error {
    move |err| Error::Post { what, err }
}

/// A receive request of one SGE.
pub fn recv_wr(wr_id: u64, sge: &Sge) -> RecvWr<'_> {
    RecvWr {
        wr_id,
        sg_list: std::slice::from_ref(sge),
    }
}

/// Queue sizes and connection parameters of the QPs.
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// Send queue depth.
    pub sq: u32,
    /// Receive queue depth.
    pub rq: u32,
    /// Inline data the QP must accept (0: none).
    pub inline: u32,
    /// Path MTU (`None`: the port's active MTU).
    pub mtu: Option<Mtu>,
}

/// Every access right an MR or a QP can grant.
const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// The Q_Key of the embedded mode's SRD QPs.
pub const SRD_QKEY: u32 = 0x7270_6566;

/// How the pair's QPs are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// RC QPs (ConnectX).
    Rc,
    /// SRD QPs and an AH per end (EFA).
    Srd,
}

#[cfg(feature = "emulator")]
/// One NIC: the opened device and its PD (shared by every lane on it).
pub struct Nic<D: Device> {
    /// The driver.
    pub dev: D,
    pd: D::Pd,
    /// The port's RoCE GID (IPv4-mapped).
    pub gid: Gid,
    /// The port's MAC.
    pub mac: [u8; 6],
    /// The port's address.
    pub ip: Ipv4Addr,
    /// What the lanes' MRs grant (every right the device has).
    access: AccessFlags,
    /// Most inline bytes of a send.
    max_inline: u32,
}

#[cfg(feature = "emulator")]
impl<D: Device> Nic<D> {
    /// Allocates the PD of `dev`, whose port is at `ip` with MAC `mac`.
    pub fn new(dev: D, ip: Ipv4Addr, mac: [u8; 6]) -> Result<Nic<D>> {
        let attr = Provider::query_device(&dev).map_err(verbs_err("query_device"))?;
        let access = if attr.atomic_cap == AtomicCap::None {
            ALL_ACCESS.difference(AccessFlags::REMOTE_ATOMIC)
        } else {
            ALL_ACCESS
        };
        let pd = Provider::alloc_pd(&dev).map_err(verbs_err("alloc_pd"))?;
        Ok(Nic {
            dev,
            pd,
            gid: Gid::from_ipv4(ip.octets()),
            mac,
            ip,
            access,
            max_inline: attr.max_inline_data,
        })
    }

    /// Frees the PD and shuts the driver down.
    pub fn close(self) -> Result<()> {
        let Nic { dev, pd, ip, .. } = self;
        Provider::dealloc_pd(&dev, pd).map_err(|e| Error::Verbs {
            what: "dealloc_pd",
            err: e.error,
        })?;
        dev.shutdown()
            .map_err(|e| Error::Check(format!("{ip}: {e}")))
    }
}

#[cfg(feature = "emulator")]
/// One lane's end on one NIC: its CQ, its registered buffer and its RC QP.
pub struct End<D: Device> {
    /// The NIC.
    pub nic: Arc<Nic<D>>,
    /// Send and receive completions of the QP.
    pub cq: D::Cq,
    /// Its registration of [`End::buf`].
    pub mr: D::Mr,
    /// The QP.
    pub qp: D::Qp,
    /// The QP's initial send PSN.
    pub psn: u32,
    /// The registered buffer `[SRC | DST]` (the pattern seed is the last byte of the NIC's
    /// address, plus the lane).
    pub buf: Buffer,
    /// SRD: the AH of the peer (one per destination, shared by the lanes) and the peer's QPN
    /// (every send names them).
    dest: Option<(Arc<D::Ah>, u32)>,
}

#[cfg(feature = "emulator")]
impl<D: Device> End<D> {
    /// Lane `lane`'s end on `nic`.
    pub fn new(
        nic: &Arc<Nic<D>>,
        lane: usize,
        region: usize,
        cfg: &QpConfig,
        transport: Transport,
    ) -> Result<End<D>> {
        let dev = &nic.dev;
        let cqe = (cfg.sq + cfg.rq + 16).next_power_of_two();
        let cq = Provider::create_cq(dev, cqe, 0, None).map_err(verbs_err("create_cq"))?;
        let mem = Provider::alloc_buf(dev, 2 * region).map_err(|err| Error::Dma {
            what: "allocate buffer",
            err,
        })?;
        let mr =
            Provider::reg_mr(dev, &nic.pd, mem.clone(), nic.access).map_err(verbs_err("reg_mr"))?;
        let want = QpCap {
            max_send_wr: cfg.sq,
            max_recv_wr: cfg.rq,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.inline,
        };
        let (qp, _cap) = Provider::create_qp(
            dev,
            &nic.pd,
            &QpInitAttr {
                qp_type: match transport {
                    Transport::Rc => QpType::Rc,
                    Transport::Srd => QpType::Srd,
                },
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: want,
                sq_sig_all: false,
            },
        )
        .map_err(|err| {
            if cfg.inline > 0 && err == verbs::Error::InvalidArgument {
                Error::Check(format!(
                    "create_qp: the device refuses {} bytes of inline data with a send queue \
                     of {} (lower -I)",
                    cfg.inline, cfg.sq
                ))
            } else {
                Error::Verbs {
                    what: "create_qp",
                    err,
                }
            }
        })?;
        // A PSN that differs per NIC and QP, fixed from run to run (perftest draws one).
        let seed = verbs::QueuePair::qp_num(&qp) ^ u32::from_be_bytes(nic.ip.octets());
        let psn = (seed.wrapping_mul(0x9e37_79b1) >> 8) & 0xff_ffff;
        let who = nic.ip.octets()[3].wrapping_add((lane as u8).wrapping_mul(16));
        let buf = Buffer::new(mem, mr.lkey(), mr.rkey(), region, who);
        Ok(End {
            nic: nic.clone(),
            cq,
            mr,
            qp,
            psn,
            buf,
            dest: None,
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        verbs::QueuePair::qp_num(&self.qp)
    }

    /// The path to `peer` (for RTR).
    fn path_to(&self, peer: &End<D>) -> AhAttr {
        AhAttr {
            dgid: peer.nic.gid,
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: peer.nic.mac,
            ..AhAttr::default()
        }
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer`, with perftest's timers (the defaults of
    /// [`verbs::rc::RcParams`]: RNR timer 0.64 ms, ACK timeout 14, 7 retries each).
    fn connect(&mut self, peer: &End<D>, mtu: Mtu, rd_atomic: u8) -> Result<()> {
        let params = verbs::rc::RcParams {
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ah_attr: self.path_to(peer),
            path_mtu: mtu,
            dest_qp_num: peer.qpn(),
            rq_psn: peer.psn,
            max_dest_rd_atomic: rd_atomic,
            sq_psn: self.psn,
            max_rd_atomic: rd_atomic,
            ..Default::default()
        };
        verbs::rc::connect(&self.nic.dev, &mut self.qp, &params)
            .map_err(verbs_err("modify_qp RESET -> INIT -> RTR -> RTS"))
    }

    /// SRD: RESET -> INIT (port 1, P_Key index 0, [`SRD_QKEY`]) -> RTR -> RTS (RNR retry 7,
    /// for ever, where the device has RNR retry); sends go to `peer` through `ah`.
    fn connect_srd(&mut self, peer: &End<D>, ah: &Arc<D::Ah>) -> Result<()> {
        let dev = &self.nic.dev;
        let what = "modify_qp RESET -> INIT -> RTR -> RTS (SRD)";
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            qkey: SRD_QKEY,
            ..Default::default()
        };
        let m = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY;
        Provider::modify_qp(dev, &mut self.qp, &init, m).map_err(verbs_err(what))?;
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..Default::default()
        };
        Provider::modify_qp(dev, &mut self.qp, &rtr, QpAttrMask::STATE).map_err(verbs_err(what))?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: self.psn,
            rnr_retry: 7,
            ..Default::default()
        };
        let m = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
        match Provider::modify_qp(dev, &mut self.qp, &rts, m | QpAttrMask::RNR_RETRY) {
            Err(verbs::Error::NotSupported) => {
                Provider::modify_qp(dev, &mut self.qp, &rts, m).map_err(verbs_err(what))?
            }
            r => r.map_err(verbs_err(what))?,
        }
        self.dest = Some((ah.clone(), peer.qpn()));
        Ok(())
    }

    /// Destroys the QP, the CQ (checking it saw no malformed entry) and the MR, and frees
    /// the buffer (the AH, shared, goes with the pair).
    fn teardown(self) -> Result<()> {
        let End {
            nic,
            cq,
            buf,
            mr,
            qp,
            ..
        } = self;
        let dev = &nic.dev;
        let destroy = |what: &'static str, err: verbs::Error| Error::Verbs { what, err };
        Provider::destroy_qp(dev, qp).map_err(|e| destroy("destroy_qp", e.error))?;
        let bad = D::bad_cqes(&cq);
        Provider::destroy_cq(dev, cq).map_err(|e| destroy("destroy_cq", e.error))?;
        Provider::dereg_mr(dev, mr).map_err(|e| destroy("dereg_mr", e.error))?;
        drop(buf);
        if bad != 0 {
            return Err(Error::Check(format!("{}: {bad} malformed CQEs", nic.ip)));
        }
        Ok(())
    }
}

#[cfg(feature = "emulator")]
/// The device type of the embedded mode on ConnectX (`--device emu`).
pub type EmbeddedDevice = nic_testbed::EmuDevice;

#[cfg(feature = "emulator")]
/// The device type of the embedded mode on EFA (`--device efa`).
pub type EmbeddedEfa = nic_testbed::efa::EfaDevice;

#[cfg(feature = "emulator")]
/// Two AHs, one on each NIC, each to the other's GID.
type AhPair<D> = (Arc<<D as Provider>::Ah>, Arc<<D as Provider>::Ah>);

#[cfg(feature = "emulator")]
/// Both NICs, one connection per lane, and the world they live in.
pub struct Pair<D: Device = EmbeddedDevice> {
    /// The fabric, the devices and the virtual clock.
    pub world: Arc<World>,
    /// Per lane, the requester (perftest's client) and the responder (perftest's server).
    pub lanes: Vec<(End<D>, End<D>)>,
    /// The client NIC.
    pub c: Arc<Nic<D>>,
    /// The server NIC.
    pub s: Arc<Nic<D>>,
    backings: [device_open::Backing; 2],
    /// Firmware version of the client NIC.
    pub fw: (u16, u16, u16),
    /// The path MTU in use.
    pub mtu: Mtu,
    /// Outstanding READs / atomics per QP.
    pub rd_atomic: u8,
    /// Inline bytes the QPs accept (the asked-for amount; on EFA at most the device's).
    pub inline: u32,
    /// SRD: the client's AH of the server and the server's of the client.
    ahs: Option<AhPair<D>>,
}

#[cfg(feature = "emulator")]
fn profile_for(ip: Ipv4Addr) -> Profile {
    Profile {
        mac: [0x02, 0, 0, 0, 0x01, ip.octets()[3]],
        ..Profile::default()
    }
}

#[cfg(feature = "emulator")]
fn open_nic(
    world: &Arc<World>,
    ip: Ipv4Addr,
) -> Result<(Nic<EmbeddedDevice>, device_open::Backing)> {
    let o = InProcess {
        world,
        ip,
        profile: profile_for(ip),
    }
    .open()
    .map_err(Error::Check)?;
    Ok((Nic::new(o.dev, ip, o.mac)?, o.backing))
}

#[cfg(feature = "emulator")]
fn open_efa(world: &Arc<World>, ip: Ipv4Addr) -> Result<(Nic<EmbeddedEfa>, device_open::Backing)> {
    let o = EfaInProcess {
        world,
        ip,
        profile: Default::default(),
    }
    .open()
    .map_err(Error::Check)?;
    Ok((Nic::new(o.dev, ip, o.mac)?, o.backing))
}

#[cfg(feature = "emulator")]
impl Pair<EmbeddedDevice> {
    /// Two emulated ConnectX NICs with `lanes` connected RC QPs between them, each end with
    /// `region` bytes of SRC and of DST.
    pub fn new(region: usize, cfg: &QpConfig, lanes: usize) -> Result<Pair> {
        let world = World::new(WORLD_SEED);
        let c = open_nic(&world, IP_CLIENT)?;
        let s = open_nic(&world, IP_SERVER)?;
        Pair::build(world, c, s, Transport::Rc, region, cfg, lanes)
    }
}

#[cfg(feature = "emulator")]
impl Pair<EmbeddedEfa> {
    /// Two emulated EFAs with `lanes` SRD QPs between them (an AH each way), each end with
    /// `region` bytes of SRC and of DST; inline data at most the device's.
    pub fn new_efa(region: usize, cfg: &QpConfig, lanes: usize) -> Result<Pair<EmbeddedEfa>> {
        let world = World::new(WORLD_SEED);
        let c = open_efa(&world, IP_CLIENT)?;
        let s = open_efa(&world, IP_SERVER)?;
        let cfg = QpConfig {
            inline: cfg.inline.min(c.0.max_inline),
            ..*cfg
        };
        Pair::build(world, c, s, Transport::Srd, region, &cfg, lanes)
    }
}

#[cfg(feature = "emulator")]
impl<D: Device> Pair<D> {
    fn build(
        world: Arc<World>,
        (c, cb): (Nic<D>, device_open::Backing),
        (s, sb): (Nic<D>, device_open::Backing),
        transport: Transport,
        region: usize,
        cfg: &QpConfig,
        lanes: usize,
    ) -> Result<Pair<D>> {
        let region = region.max(4096).next_multiple_of(4096);
        let (c, s) = (Arc::new(c), Arc::new(s));
        let port = Provider::query_port(&c.dev, 1).map_err(verbs_err("query_port"))?;
        let attr = Provider::query_device(&c.dev).map_err(verbs_err("query_device"))?;
        let mtu = cfg.mtu.unwrap_or(port.active_mtu);
        let rd_atomic = u32::from(MAX_RD_ATOMIC)
            .min(attr.max_qp_rd_atom)
            .min(attr.max_qp_init_rd_atom)
            .max(1) as u8;
        let fw = device_open::Device::fw_version(&c.dev);
        let mut pair = Pair {
            world,
            lanes: Vec::with_capacity(lanes),
            c,
            s,
            backings: [cb, sb],
            fw,
            mtu,
            rd_atomic,
            inline: cfg.inline,
            ahs: None,
        };
        if transport == Transport::Srd {
            let ah = |from: &Nic<D>, to: &Nic<D>| {
                Provider::create_ah(
                    &from.dev,
                    &from.pd,
                    &AhAttr {
                        dgid: to.gid,
                        port_num: 1,
                        ..AhAttr::default()
                    },
                )
                .map(Arc::new)
                .map_err(verbs_err("create_ah"))
            };
            let cs = ah(&pair.c, &pair.s)?;
            pair.ahs = Some((cs, ah(&pair.s, &pair.c)?));
        }
        for k in 0..lanes {
            let mut ce = End::new(&pair.c, k, region, cfg, transport)?;
            let mut se = End::new(&pair.s, k, region, cfg, transport)?;
            match transport {
                Transport::Rc => {
                    ce.connect(&se, mtu, rd_atomic)?;
                    se.connect(&ce, mtu, rd_atomic)?;
                }
                Transport::Srd => {
                    let Some((cs, sc)) = &pair.ahs else {
                        return Err(Error::Check("SRD without AHs".into()));
                    };
                    ce.connect_srd(&se, cs)?;
                    se.connect_srd(&ce, sc)?;
                }
            }
            ce.buf.peer = se.buf.as_peer();
            se.buf.peer = ce.buf.as_peer();
            pair.lanes.push((ce, se));
        }
        Ok(pair)
    }

    /// The first lane's ends.
    pub fn lane0(&self) -> (&End<D>, &End<D>) {
        let (c, s) = &self.lanes[0];
        (c, s)
    }

    /// For a run of `test` at `size` on the first lane: see [`split_lane`].
    pub fn split(
        &mut self,
        test: Test,
        size: usize,
        use_inline: bool,
        rx_depth: u32,
        limit: u64,
    ) -> Result<(&mut End<D>, Near<'_, D>, &World)> {
        let Pair { world, lanes, .. } = self;
        let (c, s) = &mut lanes[0];
        split_lane(c, s, world, test, size, use_inline, rx_depth, limit)
    }

    /// Tears every lane down, then both NICs, and checks that the devices hold no object,
    /// the drivers no DMA memory, and that the devices logged no error.
    pub fn teardown(self) -> Result<()> {
        let Pair {
            lanes,
            c,
            s,
            backings,
            ahs,
            ..
        } = self;
        let mut r = Ok(());
        for (ce, se) in lanes {
            r = r.and(ce.teardown()).and(se.teardown());
        }
        r?;
        if let Some((cs, sc)) = ahs {
            for (nic, ah) in [(&c, cs), (&s, sc)] {
                let ah = Arc::try_unwrap(ah)
                    .map_err(|_| Error::Check("an AH is still in use at teardown".into()))?;
                Provider::destroy_ah(&nic.dev, ah).map_err(|e| Error::Verbs {
                    what: "destroy_ah",
                    err: e.error,
                })?;
            }
        }
        let close = |n: Arc<Nic<D>>| match Arc::try_unwrap(n) {
            Ok(n) => n.close(),
            Err(_) => Err(Error::Check("a NIC is still in use at teardown".into())),
        };
        let rc = close(c);
        let rs = close(s);
        rc.and(rs)?;
        for b in &backings {
            b.check().map_err(Error::Check)?;
        }
        Ok(())
    }
}

#[cfg(feature = "emulator")]
/// For a run of `test` at `size` on one lane: the client end, the server end as its far end
/// (a [`Responder`] driven from the client's thread, see [`Responder::new`]) and the world
/// that paces both.
#[allow(clippy::too_many_arguments)]
pub fn split_lane<'a, D: Device>(
    c: &'a mut End<D>,
    s: &'a mut End<D>,
    world: &'a World,
    test: Test,
    size: usize,
    use_inline: bool,
    rx_depth: u32,
    limit: u64,
) -> Result<(&'a mut End<D>, Near<'a, D>, &'a World)> {
    let resp = Responder::new(s, test, size, use_inline, rx_depth, limit)?;
    Ok((
        c,
        Near {
            end: s,
            world,
            resp,
        },
        world,
    ))
}

#[cfg(feature = "emulator")]
/// Fails a wait that makes no progress for [`STALL_LIMIT_NS`] of virtual time, or for
/// [`STALL_LIMIT_WALL`] of wall-clock time (a device that keeps "making progress" without
/// getting anywhere would never move the virtual clock); each spin runs the world one step.
pub struct Watchdog<'a> {
    world: &'a World,
    since_ns: u64,
    since_wall: Instant,
    relaxes: u32,
    what: &'static str,
}

/// Wall-clock limit of a wait without progress.
pub const STALL_LIMIT_WALL: Duration = Duration::from_secs(120);

#[cfg(feature = "emulator")]
impl Pace for World {
    type Wait<'a> = Watchdog<'a>;

    fn wait(&self, what: &'static str) -> Watchdog<'_> {
        Watchdog {
            world: self,
            since_ns: self.now_ns(),
            since_wall: Instant::now(),
            relaxes: 0,
            what,
        }
    }
}

#[cfg(feature = "emulator")]
impl Wait for Watchdog<'_> {
    fn progress(&mut self) {
        self.since_ns = self.world.now_ns();
        self.relaxes = 0;
        self.since_wall = Instant::now();
    }

    fn relax(&mut self) -> Result<()> {
        self.world.relax();
        if self.world.now_ns().saturating_sub(self.since_ns) > STALL_LIMIT_NS {
            return Err(Error::Stalled { what: self.what });
        }
        self.relaxes = self.relaxes.wrapping_add(1);
        if self.relaxes.is_multiple_of(4096) && self.since_wall.elapsed() > STALL_LIMIT_WALL {
            return Err(Error::Stalled { what: self.what });
        }
        Ok(())
    }
}

#[cfg(feature = "emulator")]
impl<D: Device> Port for End<D> {
    fn post(&mut self, r: &Request) -> Result<()> {
        let mut sg = [Sge::default()];
        let mut wr = self.buf.wr(r, &mut sg)?;
        if let Some((ah, remote_qpn)) = &self.dest {
            wr.dest = Some(UdDest {
                ah: &**ah,
                remote_qpn: *remote_qpn,
                remote_qkey: SRD_QKEY,
            });
        }
        Provider::post_send(&self.nic.dev, &mut self.qp, &[wr]).map_err(post_err("post_send"))
    }

    fn post_recv(&mut self, wr_id: u64, off: usize, len: usize) -> Result<()> {
        let sge = self.buf.sge(off, len);
        Provider::post_recv(&self.nic.dev, &mut self.qp, &[recv_wr(wr_id, &sge)])
            .map_err(post_err("post_recv"))
    }

    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        Provider::poll_cq(&self.nic.dev, &self.cq, wc).map_err(verbs_err("poll_cq"))
    }

    fn buf(&self) -> &Buffer {
        &self.buf
    }

    fn buf_mut(&mut self) -> &mut Buffer {
        &mut self.buf
    }
}

#[cfg(feature = "emulator")]
/// The server NIC of a [`Pair`] as the client's loops see it: a [`Responder`] driven from
/// the client's thread.
pub struct Near<'a, D: Device> {
    end: &'a mut End<D>,
    world: &'a World,
    resp: Responder,
}

#[cfg(feature = "emulator")]
impl<D: Device> Peer<End<D>> for Near<'_, D> {
    fn answer(&mut self) -> Result<()> {
        let want = self.resp.answered + 1;
        let mut wd = self.world.wait("the peer's message");
        loop {
            self.resp.step(self.end, self.world)?;
            if self.resp.answered >= want {
                return Ok(());
            }
            wd.relax()?;
        }
    }

    fn before_read(&mut self, _c: &mut End<D>, size: usize, st: u8) -> Result<u8> {
        // A new stamp in the server's memory each time: every READ must fetch it.
        self.end.stamp(size, st)?;
        Ok(st)
    }

    fn serve(&mut self, limit: u64) -> Result<bool> {
        if !self.resp.has_ring() {
            return Ok(false);
        }
        self.resp.q.limit = limit;
        self.resp.step(self.end, self.world)
    }

    fn received(&self, limit: u64) -> bool {
        !self.resp.has_ring() || self.resp.q.recvs >= limit
    }

    fn finish(&mut self, _c: &mut End<D>, count: u64) -> Result<Verdict> {
        self.resp.finish(self.end, self.world, count)
    }
}

/// Checks a completion's status.
pub fn check_ok(wc: &WorkCompletion, what: &'static str) -> Result<()> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(Error::Completion { what, wc: *wc })
    }
}

/// Fills `out` with an xorshift pattern that depends on `seed`.
pub fn fill_pattern(seed: u64, out: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// What SRC slot `slot` of `size`-byte messages holds on the NIC whose pattern seed is `who`
/// (the last byte of its address): both ends of a two-process run can compute it.
pub fn slot_pattern(who: u8, size: usize, slot: usize, out: &mut [u8]) {
    let seed = (u64::from(who) << 56) ^ ((size as u64) << 16) ^ slot as u64;
    fill_pattern(seed, out);
}

/// FNV-1a (64-bit) of `data`: the checksum compared between what was sent and what arrived.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Compares `got` (what arrived) with `want` (what was sent): `Ok` or a description of the
/// first difference.
pub fn compare(got: &[u8], want: &[u8], what: &str) -> std::result::Result<(), String> {
    let (g, w) = (fnv1a(got), fnv1a(want));
    if g == w && got == want {
        return Ok(());
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Err(format!(
        "{what}: checksum {g:#018x}, sent {w:#018x}; first difference at byte {at} of {}",
        want.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_and_compare() {
        let mut a = vec![0u8; 13];
        let mut b = vec![0u8; 13];
        fill_pattern(1, &mut a);
        fill_pattern(2, &mut b);
        assert_ne!(a, b);
        assert!(compare(&a, &a.clone(), "x").is_ok());
        let mut c = a.clone();
        c[7] ^= 1;
        let e = compare(&c, &a, "x").unwrap_err();
        assert!(e.contains("byte 7"), "{e}");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
