//! Helpers shared by the end-to-end data-path tests: two NICs on one fabric, each with a
//! driver, a PD, a CQ and one registered buffer; QPs connected through the verbs provider;
//! polling that runs the world; payload patterns and SGE layouts; the teardown leak check.

#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::sync::Arc;

use mlx5::{Ah, Cq, Mr, Pd, Qp};
use nic_emulator::{Live, Profile};
use nic_testbed::{EmuDevice, Testbed, World};
use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Mtu, Provider, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, WorkCompletion, WrOpcode,
};

/// Port address of the first NIC.
pub const IP_A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Port address of the second NIC.
pub const IP_B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// Every access right an MR or a QP can grant.
pub const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// One NIC's driver and the objects a test needs.
pub struct Node {
    pub tb: Testbed,
    pub dev: EmuDevice,
    pub pd: Pd,
    pub cq: Cq,
    pub mem: Buffer,
    pub mr: Mr,
    pub gid: Gid,
    pub mac: [u8; 6],
}

/// A profile for the NIC at `ip`: its own MAC (the last octet), the rest default.
pub fn profile_for(ip: Ipv4Addr, base: &Profile) -> Profile {
    Profile {
        mac: [0x02, 0, 0, 0, 0x01, ip.octets()[3]],
        ..base.clone()
    }
}

/// Probes the NIC, programs its RoCE GID, and makes a PD, a CQ of `cqe` entries and a buffer
/// of `mem` bytes registered with every access right.
pub fn node(tb: Testbed, mem: usize, cqe: u32) -> Node {
    let dev = tb.probe(mlx5::Config::default()).expect("probe");
    let gid = Gid::from_ipv4(tb.ip().octets());
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, gid.0, mac).unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, cqe, 1, None).unwrap();
    let buf = Provider::alloc_buf(&dev, mem).unwrap();
    let mr = dev.reg_mr(&pd, buf.clone(), ALL_ACCESS).unwrap();
    Node {
        tb,
        dev,
        pd,
        cq,
        mem: buf,
        mr,
        gid,
        mac,
    }
}

/// Two NICs, at [`IP_A`] and [`IP_B`], on one fabric seeded with `seed`.
pub fn pair_with(seed: u64, profile: &Profile, mem: usize, cqe: u32) -> (Arc<World>, Node, Node) {
    let world = World::new(seed);
    let a = node(world.nic(IP_A, profile_for(IP_A, profile)), mem, cqe);
    let b = node(world.nic(IP_B, profile_for(IP_B, profile)), mem, cqe);
    (world, a, b)
}

/// Two default NICs with `mem` bytes of registered memory and 1023-entry CQs.
pub fn pair(seed: u64, mem: usize) -> (Arc<World>, Node, Node) {
    pair_with(seed, &Profile::default(), mem, 1023)
}

/// RC connection parameters (the RTR and RTS attributes a test varies).
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub mtu: Mtu,
    /// Local ACK timeout code (4.096 µs × 2^timeout on the device's unit).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    /// Remote access the QP grants as responder.
    pub access: AccessFlags,
    pub sq_psn: u32,
    pub rq_psn: u32,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            sq_psn: 0x100,
            rq_psn: 0x100,
        }
    }
}

impl Conn {
    /// The bring-up parameters towards the QP `dest_qp_num` over `path`.
    pub fn params(&self, path: AhAttr, dest_qp_num: u32) -> verbs::rc::RcParams {
        verbs::rc::RcParams {
            access: self.access,
            ah_attr: path,
            path_mtu: self.mtu,
            dest_qp_num,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            ..verbs::rc::RcParams::default()
        }
    }
}

/// Queue sizes used unless a test asks for others.
pub const CAP: QpCap = QpCap {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 3,
    max_recv_sge: 3,
    max_inline_data: 64,
};

impl Node {
    /// A QP in RESET on this node's CQ; returns it and the actual sizes.
    pub fn qp(&self, qp_type: QpType, cap: QpCap, sig_all: bool) -> (Qp, QpCap) {
        self.qp_on(&self.cq, qp_type, cap, sig_all)
    }

    /// A QP in RESET whose send and receive completions go to `cq`.
    pub fn qp_on(&self, cq: &Cq, qp_type: QpType, cap: QpCap, sig_all: bool) -> (Qp, QpCap) {
        Provider::create_qp(
            &self.dev,
            &self.pd,
            &QpInitAttr {
                qp_type,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap,
                sq_sig_all: sig_all,
            },
        )
        .expect("create_qp")
    }

    /// The AH / primary path towards `peer`.
    pub fn path_to(&self, peer: &Node) -> AhAttr {
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

    /// RESET -> INIT -> RTR -> RTS towards `peer`'s QP `remote_qpn`.
    pub fn connect(&self, qp: &mut Qp, peer: &Node, remote_qpn: u32, c: &Conn) {
        verbs::rc::connect(&self.dev, qp, &c.params(self.path_to(peer), remote_qpn))
            .expect("RESET -> INIT -> RTR -> RTS");
    }

    /// A UD QP RESET -> INIT -> RTR -> RTS with Q_Key `qkey`.
    pub fn ud_up(&self, qp: &mut Qp, qkey: u32) {
        let mut at = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey,
            ..QpAttr::default()
        };
        Provider::modify_qp(
            &self.dev,
            qp,
            &at,
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
        )
        .unwrap();
        at.qp_state = QpState::Rtr;
        Provider::modify_qp(&self.dev, qp, &at, M::STATE).unwrap();
        at.qp_state = QpState::Rts;
        Provider::modify_qp(&self.dev, qp, &at, M::STATE | M::SQ_PSN).unwrap();
    }

    /// An address handle for `peer`.
    pub fn ah_to(&self, peer: &Node) -> Ah {
        Provider::create_ah(&self.dev, &self.pd, &self.path_to(peer)).unwrap()
    }

    /// The device address of byte `off` of the buffer.
    pub fn addr(&self, off: usize) -> u64 {
        self.mem.addr() + off as u64
    }

    /// An SGE for `len` bytes at `off` of the buffer.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr(off),
            length: len as u32,
            lkey: self.mr.lkey(),
        }
    }

    /// SGEs for the pieces of `lay`.
    pub fn sges(&self, lay: &[(usize, usize)]) -> Vec<Sge> {
        lay.iter().map(|&(o, l)| self.sge(o, l)).collect()
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        self.mem.write(off, data).unwrap();
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read(off, &mut v).unwrap();
        v
    }

    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        self.mem.fill(off, len, byte).unwrap();
    }

    /// Writes `data` scattered over the pieces of `lay` (in order).
    pub fn write_scattered(&self, lay: &[(usize, usize)], data: &[u8]) {
        let mut at = 0;
        for &(o, l) in lay {
            self.write(o, &data[at..at + l]);
            at += l;
        }
        assert_eq!(at, data.len());
    }

    /// Reads the first `len` bytes of the pieces of `lay`, in order.
    pub fn read_gathered(&self, lay: &[(usize, usize)], len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        for &(o, l) in lay {
            let n = l.min(len - out.len());
            out.extend(self.read(o, n));
        }
        assert_eq!(out.len(), len, "layout shorter than {len}");
        out
    }

    pub fn post_send(&self, qp: &mut Qp, wrs: &[SendWr<'_, Ah>]) {
        Provider::post_send(&self.dev, qp, wrs).expect("post_send");
    }

    pub fn post_recv(&self, qp: &mut Qp, wr_id: u64, sg: &[Sge]) {
        Provider::post_recv(&self.dev, qp, &[RecvWr { wr_id, sg_list: sg }]).expect("post_recv");
    }

    /// The device recorded no error (no driver mistake it could see).
    pub fn no_device_errors(&self) {
        let errs = self.tb.device().errors().to_vec();
        assert!(errs.is_empty(), "{}: device errors: {errs:?}", self.tb.ip());
    }

    /// The QP's state as the device sees it.
    pub fn qp_state(&self, qp: &Qp) -> QpState {
        Provider::query_qp(&self.dev, qp).unwrap().qp_state
    }

    /// The port counters.
    pub fn stats(&self) -> nic_emulator::PortStats {
        self.tb.device().port_stats()
    }

    /// Destroys `qps`, the CQ, the MR and the PD, frees the buffer, shuts the driver down, and
    /// checks that the device holds no object and the driver no DMA memory.
    pub fn teardown(self, qps: Vec<Qp>) {
        let Node {
            tb,
            dev,
            pd,
            cq,
            mem,
            mr,
            ..
        } = self;
        for qp in qps {
            Provider::destroy_qp(&dev, qp).expect("destroy_qp");
        }
        assert_eq!(cq.bad_cqes().0, 0, "malformed CQEs seen");
        Provider::destroy_cq(&dev, cq).expect("destroy_cq");
        Provider::dereg_mr(&dev, mr).expect("dereg_mr");
        Provider::dealloc_pd(&dev, pd).expect("dealloc_pd");
        drop(mem);
        dev.shutdown().expect("shutdown");
        assert_eq!(tb.live(), Live::default(), "objects left on the device");
        assert_eq!(tb.dma.live_buffers(), 0, "driver DMA memory left behind");
    }
}

/// Polls `cq` until `n` completions arrived, running the world in between; panics after
/// `100_000` relaxes.
pub fn poll_n(world: &World, n: &Node, cq: &Cq, want: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    for _ in 0..100_000 {
        let k = Provider::poll_cq(&n.dev, cq, &mut wc).expect("poll_cq");
        got.extend_from_slice(&wc[..k]);
        if got.len() >= want {
            assert_eq!(got.len(), want, "more completions than expected: {got:?}");
            return got;
        }
        world.relax();
    }
    panic!("only {} of {want} completions: {got:?}", got.len());
}

/// Runs the world for `relaxes` steps and returns whatever `cq` completes meanwhile.
pub fn drain(world: &World, n: &Node, cq: &Cq, relaxes: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    for _ in 0..relaxes {
        let k = Provider::poll_cq(&n.dev, cq, &mut wc).expect("poll_cq");
        got.extend_from_slice(&wc[..k]);
        world.relax();
    }
    let k = Provider::poll_cq(&n.dev, cq, &mut wc).expect("poll_cq");
    got.extend_from_slice(&wc[..k]);
    got
}

/// `(wr_id, status)` of each completion.
pub fn summary(wc: &[WorkCompletion]) -> Vec<(u64, verbs::WcStatus)> {
    wc.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Every asynchronous event the NIC's driver has so far.
///
/// Communication-established events are left out: every RC QP raises one when its first
/// packet arrives (the connection manager's RTU stand-in), so they say nothing about the
/// errors these tests look for.
pub fn async_events(n: &Node) -> Vec<verbs::AsyncEvent> {
    let mut v = Vec::new();
    while let Some(e) = Provider::get_async_event(&n.dev).expect("get_async_event") {
        if e.event_type != verbs::AsyncEventType::CommEst {
            v.push(e);
        }
    }
    v
}

/// Runs the world until `cond` holds; false if it did not within `max` relaxes.
pub fn run_until(world: &World, max: usize, mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..max {
        if cond() {
            return true;
        }
        world.relax();
    }
    cond()
}

/// A send work request with everything else default.
pub fn wr<'a>(wr_id: u64, opcode: WrOpcode, sg: &'a [Sge]) -> SendWr<'a, Ah> {
    SendWr {
        wr_id,
        opcode,
        sg_list: sg,
        ..SendWr::default()
    }
}

/// `len` bytes of a pattern that depends on `seed` (xorshift; no two seeds alike).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Splits `len` bytes into three pieces cut at odd offsets (`len / 3 | 1`,
/// `2 * len / 3 | 1`, clipped to `len`); short lengths give empty pieces.
pub fn split3(len: usize) -> [usize; 3] {
    let c1 = ((len / 3) | 1).min(len);
    let c2 = ((2 * len / 3) | 1).clamp(c1, len);
    [c1, c2 - c1, len - c2]
}

/// Places pieces of the given sizes in the buffer from `base`, each at an odd offset with a
/// gap of `gap` bytes after it (the gaps show a scatter that strays).
pub fn place(base: usize, sizes: &[usize], gap: usize) -> Vec<(usize, usize)> {
    let mut at = base | 1;
    sizes
        .iter()
        .map(|&l| {
            let p = (at, l);
            at = (at + l + gap) | 1;
            p
        })
        .collect()
}

/// The end of a layout (one past its last byte, gap not included).
pub fn layout_end(lay: &[(usize, usize)]) -> usize {
    lay.iter().map(|&(o, l)| o + l).max().unwrap_or(0)
}

/// Asserts `got == want` byte for byte; on a difference, reports the first differing byte
/// (not the whole buffers).
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    if got.len() != want.len() {
        panic!("{what}: {} bytes, want {}", got.len(), want.len());
    }
    let i = got.iter().zip(want).position(|(g, w)| g != w).unwrap();
    let n = got[i..]
        .iter()
        .zip(&want[i..])
        .filter(|(g, w)| g != w)
        .count();
    panic!(
        "{what}: byte {i} is {:#04x}, want {:#04x} ({n} bytes differ from there on)",
        got[i], want[i]
    );
}

/// FNV-1a over `data`, continuing from `h`.
pub fn fnv(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a's initial value.
pub const FNV0: u64 = 0xcbf2_9ce4_8422_2325;
