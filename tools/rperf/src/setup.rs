//! The embedded mode's fixture: two emulated NICs on one in-process RoCEv2 fabric, each driven
//! by the mlx5 driver through the verbs [`Provider`] trait, with one RC QP each, connected to
//! the other by hand (RESET -> INIT -> RTR -> RTS with the peer's QPN, PSN, GID and MAC): what
//! the connection manager will do once it exists.
//!
//! Each NIC registers one buffer laid out as `[SRC region | DST region]`; a region holds
//! `slots` message-sized slots. Requests gather from SRC and land in the peer's DST (READs
//! the other way round), so what arrived can be compared with what was sent after the run.

use std::cell::Cell;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5::{Ah, Cq, Mr, Pd, Qp};
use nic_emulator::{Live, Profile};
use nic_hal::{DmaBuf, DmaError};
use nic_testbed::{EmuDevice, Testbed, World};
use verbs::{
    AccessFlags, AhAttr, Gid, MemRegion, MemoryRegion, Mtu, PostError, Provider, QpAttr,
    QpAttrMask as M, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, WcStatus, WorkCompletion,
};

/// Port address of the client (requester) NIC.
pub const IP_CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Port address of the server (responder) NIC.
pub const IP_SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
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
    /// The driver refused an operation.
    Driver {
        /// The operation.
        what: &'static str,
        /// The driver's error.
        err: mlx5::Error,
    },
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
        err: DmaError,
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
            Error::Driver { what, err } => write!(f, "{what}: driver error {err:?}"),
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

fn dma_err(what: &'static str) -> impl FnOnce(DmaError) -> Error {
    move |err| Error::Dma { what, err }
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

/// One NIC with its driver, its verbs objects and its RC QP.
pub struct End {
    /// The emulated NIC.
    pub tb: Testbed,
    /// The driver.
    pub dev: EmuDevice,
    pd: Pd,
    /// Send and receive completions of the QP.
    pub cq: Cq,
    /// The registered buffer: `[SRC | DST]`.
    pub mem: DmaBuf,
    /// Its registration.
    pub mr: Mr,
    /// The QP.
    pub qp: Qp,
    /// The port's RoCE GID (IPv4-mapped).
    pub gid: Gid,
    /// The port's MAC.
    pub mac: [u8; 6],
    /// Initial send PSN.
    pub psn: u32,
    /// Bytes in each of SRC and DST.
    pub region: usize,
    /// What SRC holds (inline sends take their payload from here).
    pub mirror: Vec<u8>,
}

impl End {
    fn new(tb: Testbed, region: usize, cfg: &QpConfig) -> Result<End> {
        let dev = tb
            .probe(mlx5::Config::default())
            .map_err(|err| Error::Driver {
                what: "probe the emulated NIC",
                err,
            })?;
        let gid = Gid::from_ipv4(tb.ip().octets());
        let mac = dev.mac().map_err(|err| Error::Driver {
            what: "query the MAC",
            err,
        })?;
        dev.set_roce_gid(0, gid.0, mac)
            .map_err(|err| Error::Driver {
                what: "program the RoCE GID",
                err,
            })?;
        let pd = Provider::alloc_pd(&dev).map_err(verbs_err("alloc_pd"))?;
        let cqe = (cfg.sq + cfg.rq + 16).next_power_of_two();
        let cq = Provider::create_cq(&dev, cqe, 0, None).map_err(verbs_err("create_cq"))?;
        let mem = DmaBuf::new(dev.dma(), 2 * region, 4096).map_err(dma_err("allocate buffer"))?;
        let mr = Provider::reg_mr(
            &dev,
            &pd,
            &MemRegion {
                addr: mem.iova(),
                length: mem.len() as u64,
                pages: &[],
            },
            ALL_ACCESS,
        )
        .map_err(verbs_err("reg_mr"))?;
        let want = QpCap {
            max_send_wr: cfg.sq,
            max_recv_wr: cfg.rq,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.inline,
        };
        let (qp, _cap) = Provider::create_qp(
            &dev,
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
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
        let seed = verbs::QueuePair::qp_num(&qp) ^ u32::from_be_bytes(tb.ip().octets());
        let psn = (seed.wrapping_mul(0x9e37_79b1) >> 8) & 0xff_ffff;
        Ok(End {
            tb,
            dev,
            pd,
            cq,
            mem,
            mr,
            qp,
            gid,
            mac,
            psn,
            region,
            mirror: vec![0; region],
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// Buffer offset of SRC slot `slot` for `size`-byte messages.
    pub fn src_off(slot: usize, size: usize) -> usize {
        slot * size
    }

    /// Buffer offset of DST slot `slot`.
    pub fn dst_off(&self, slot: usize, size: usize) -> usize {
        self.region + slot * size
    }

    /// An SGE over `len` bytes at buffer offset `off`.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mem.iova() + off as u64,
            length: len as u32,
            lkey: self.mr.lkey(),
        }
    }

    /// Device address of buffer offset `off` (what the peer targets) and the rkey.
    pub fn remote(&self, off: usize) -> (u64, u32) {
        (self.mem.iova() + off as u64, self.mr.rkey())
    }

    /// Polls the CQ once.
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        Provider::poll_cq(&self.dev, &self.cq, wc).map_err(verbs_err("poll_cq"))
    }

    /// Posts one receive request.
    pub fn post_recv(&mut self, wr_id: u64, sge: Sge) -> Result<()> {
        Provider::post_recv(
            &self.dev,
            &mut self.qp,
            &[RecvWr {
                wr_id,
                sg_list: &[sge],
            }],
        )
        .map_err(|err| Error::Post {
            what: "post_recv",
            err,
        })
    }

    /// Fills SRC's first `slots` slots with a pattern that differs per NIC, size and slot (and
    /// the mirror with the same), and zeroes DST; touches every page outside the timed loop.
    pub fn prepare(&mut self, size: usize, slots: usize) -> Result<()> {
        let used = size * slots;
        let who = self.tb.ip().octets()[3];
        for slot in 0..slots {
            slot_pattern(
                who,
                size,
                slot,
                &mut self.mirror[slot * size..(slot + 1) * size],
            );
        }
        self.mem
            .write(0, &self.mirror[..used])
            .map_err(dma_err("fill SRC"))?;
        self.mem
            .fill(self.region, self.region, 0)
            .map_err(dma_err("clear DST"))
    }

    /// Sets the last byte of SRC slot 0 (and of the mirror) to `stamp`: the per-iteration mark
    /// of the latency tests.
    pub fn stamp(&mut self, size: usize, stamp: u8) -> Result<()> {
        self.mirror[size - 1] = stamp;
        self.mem
            .write_u8(size - 1, stamp)
            .map_err(dma_err("stamp SRC"))
    }

    /// Reads `len` bytes at buffer offset `off`.
    pub fn read(&self, off: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.mem.read(off, &mut v).map_err(dma_err("read buffer"))?;
        Ok(v)
    }

    /// The path to `peer` (for RTR).
    fn path_to(&self, peer: &End) -> AhAttr {
        AhAttr {
            dgid: peer.gid,
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: peer.mac,
            ..AhAttr::default()
        }
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer`.
    fn connect(&mut self, peer: &End, mtu: Mtu, rd_atomic: u8) -> Result<()> {
        let mut a = QpAttr {
            qp_state: verbs::QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        Provider::modify_qp(
            &self.dev,
            &mut self.qp,
            &a,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )
        .map_err(verbs_err("modify_qp RESET -> INIT"))?;
        a.qp_state = verbs::QpState::Rtr;
        a.path_mtu = mtu;
        a.dest_qp_num = peer.qpn();
        a.rq_psn = peer.psn;
        a.max_dest_rd_atomic = rd_atomic;
        a.min_rnr_timer = 12; // 0.64 ms, perftest's value
        a.ah_attr = self.path_to(peer);
        Provider::modify_qp(
            &self.dev,
            &mut self.qp,
            &a,
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
        )
        .map_err(verbs_err("modify_qp INIT -> RTR"))?;
        a.qp_state = verbs::QpState::Rts;
        a.sq_psn = self.psn;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = rd_atomic;
        Provider::modify_qp(
            &self.dev,
            &mut self.qp,
            &a,
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
        )
        .map_err(verbs_err("modify_qp RTR -> RTS"))
    }

    /// Destroys everything, shuts the driver down, and checks that the device holds no object,
    /// the driver no DMA memory, and that the device logged no error.
    fn teardown(self) -> Result<()> {
        let End {
            tb,
            dev,
            pd,
            cq,
            mem,
            mr,
            qp,
            ..
        } = self;
        let errors = tb.device().errors().to_vec();
        let destroy = |what: &'static str, err: verbs::Error| Error::Verbs { what, err };
        Provider::destroy_qp(&dev, qp).map_err(|e| destroy("destroy_qp", e.error))?;
        let bad = cq.bad_cqes().0;
        Provider::destroy_cq(&dev, cq).map_err(|e| destroy("destroy_cq", e.error))?;
        Provider::dereg_mr(&dev, mr).map_err(|e| destroy("dereg_mr", e.error))?;
        Provider::dealloc_pd(&dev, pd).map_err(|e| destroy("dealloc_pd", e.error))?;
        drop(mem);
        dev.shutdown().map_err(|err| Error::Driver {
            what: "shutdown",
            err,
        })?;
        let ip = tb.ip();
        if !errors.is_empty() {
            return Err(Error::Check(format!("{ip}: device errors: {errors:?}")));
        }
        if bad != 0 {
            return Err(Error::Check(format!("{ip}: {bad} malformed CQEs")));
        }
        if tb.live() != Live::default() {
            return Err(Error::Check(format!(
                "{ip}: objects left on the device: {:?}",
                tb.live()
            )));
        }
        if tb.dma.live_buffers() != 0 {
            return Err(Error::Check(format!(
                "{ip}: {} DMA buffers left behind",
                tb.dma.live_buffers()
            )));
        }
        Ok(())
    }
}

/// Both ends of the connection and the world they live in.
pub struct Pair {
    /// The fabric, the devices and the virtual clock.
    pub world: Arc<World>,
    /// The requester (perftest's client).
    pub c: End,
    /// The responder (perftest's server).
    pub s: End,
    /// The path MTU in use.
    pub mtu: Mtu,
    /// Outstanding READs / atomics per QP.
    pub rd_atomic: u8,
}

fn profile_for(ip: Ipv4Addr) -> Profile {
    Profile {
        mac: [0x02, 0, 0, 0, 0x01, ip.octets()[3]],
        ..Profile::default()
    }
}

impl Pair {
    /// Two NICs with `region` bytes of SRC and of DST each, and connected RC QPs.
    pub fn new(region: usize, cfg: &QpConfig) -> Result<Pair> {
        let region = region.max(4096).next_multiple_of(4096);
        let world = World::new(WORLD_SEED);
        let mut c = End::new(world.nic(IP_CLIENT, profile_for(IP_CLIENT)), region, cfg)?;
        let mut s = End::new(world.nic(IP_SERVER, profile_for(IP_SERVER)), region, cfg)?;
        let port = Provider::query_port(&c.dev, 1).map_err(verbs_err("query_port"))?;
        let mtu = cfg.mtu.unwrap_or(port.active_mtu);
        let caps = c.dev.caps();
        let rd_atomic = MAX_RD_ATOMIC
            .min(1u8 << caps.log_max_ra_req_qp.min(caps.log_max_ra_res_qp).min(7))
            .max(1);
        c.connect(&s, mtu, rd_atomic)?;
        s.connect(&c, mtu, rd_atomic)?;
        Ok(Pair {
            world,
            c,
            s,
            mtu,
            rd_atomic,
        })
    }

    /// Tears both ends down (see [`End::teardown`]).
    pub fn teardown(self) -> Result<()> {
        let Pair { c, s, .. } = self;
        let rc = c.teardown();
        let rs = s.teardown();
        rc.and(rs)
    }
}

/// Fails a wait that makes no progress for [`STALL_LIMIT_NS`] of virtual time, or for
/// [`STALL_LIMIT_WALL`] of wall-clock time (a device that keeps "making progress" without
/// getting anywhere would never move the virtual clock).
pub struct Watchdog {
    since_ns: u64,
    since_wall: Instant,
    relaxes: Cell<u32>,
    what: &'static str,
}

/// Wall-clock limit of a wait without progress.
pub const STALL_LIMIT_WALL: Duration = Duration::from_secs(120);

impl Watchdog {
    /// Starts watching a wait for `what`.
    pub fn new(world: &World, what: &'static str) -> Watchdog {
        Watchdog {
            since_ns: world.now_ns(),
            since_wall: Instant::now(),
            relaxes: Cell::new(0),
            what,
        }
    }

    /// Something moved: restart the limits.
    pub fn progress(&mut self, world: &World) {
        self.since_ns = world.now_ns();
        self.relaxes.set(0);
        self.since_wall = Instant::now();
    }

    /// Runs the world one step; an error once a limit passed without progress.
    pub fn relax(&self, world: &World) -> Result<()> {
        world.relax();
        if world.now_ns().saturating_sub(self.since_ns) > STALL_LIMIT_NS {
            return Err(Error::Stalled { what: self.what });
        }
        let n = self.relaxes.get().wrapping_add(1);
        self.relaxes.set(n);
        if n.is_multiple_of(4096) && self.since_wall.elapsed() > STALL_LIMIT_WALL {
            return Err(Error::Stalled { what: self.what });
        }
        Ok(())
    }
}

/// Posts one send request on `qp` (a free function so that the request may borrow another
/// field of the same [`End`], as inline sends borrow its mirror).
pub fn post_send(dev: &EmuDevice, qp: &mut Qp, wr: SendWr<'_, Ah>) -> Result<()> {
    Provider::post_send(dev, qp, &[wr]).map_err(|err| Error::Post {
        what: "post_send",
        err,
    })
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
