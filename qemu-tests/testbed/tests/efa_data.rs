//! The EFA data path, driver against emulated device, two devices on the in-process fabric:
//! UD send/receive with the Q_Key check, SRD send/receive (with immediate), RDMA read and
//! write of every size class, SRD's exactly-once delivery over a lossy, duplicating and
//! reordering fabric, and the operations EFA does not have.

use std::net::Ipv4Addr;
use std::sync::Arc;

use nic_emulator::efa::Profile;
use nic_emulator::roce_wire::fabric::FaultConfig;
use nic_hal::Interrupts;
use nic_testbed::World;
use nic_testbed::efa::{EfaDevice, EfaTestbed};
use verbs::{
    AccessFlags, AhAttr, CompletionQueue, Error, Gid, MemoryRegion, Provider, QpAttr,
    QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, QueuePair, RecvWr, RemoteOp, SendFlags,
    SendWr, Sge, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

const QKEY: u32 = 0x1111;
const BUF: usize = 2 << 20;

/// One device with a PD, a CQ, a QP in RTS and a registered buffer.
struct Node {
    tb: EfaTestbed,
    dev: EfaDevice,
    pd: efa::Pd,
    cq: efa::Cq,
    qp: efa::Qp,
    mr: efa::Mr,
    ah: Option<efa::Ah>,
    /// The completion channel of the CQ, when made with one.
    ch: Option<efa::CompChannel>,
}

/// The context value of CQs on a channel.
const CQ_CONTEXT: u64 = 0xc0ffee;

impl Node {
    /// With `mapped`, BAR2 is mapped memory: the driver's fast path stores each WQE straight
    /// into its LLQ slot instead of a trapped block write.
    fn with(world: &Arc<World>, ip: Ipv4Addr, qp_type: QpType, mapped: bool) -> Node {
        Node::build(world, ip, qp_type, mapped, false)
    }

    /// [`Node::with`]; with `events`, the CQ is on a completion channel.
    fn build(
        world: &Arc<World>,
        ip: Ipv4Addr,
        qp_type: QpType,
        mapped: bool,
        events: bool,
    ) -> Node {
        Node::build_on(world, ip, qp_type, mapped, events, Profile::default())
    }

    /// [`Node::build`] on a device of `profile` (the QP asks for the profile's inline
    /// bytes).
    fn build_on(
        world: &Arc<World>,
        ip: Ipv4Addr,
        qp_type: QpType,
        mapped: bool,
        events: bool,
        profile: Profile,
    ) -> Node {
        let max_inline_data = profile.inline_buf_size;
        let tb = world.efa_at(ip, profile);
        let config = efa::Config {
            device_id: 0xefa1,
            ..Default::default()
        };
        let dev = if mapped {
            tb.probe_mapped(config)
        } else {
            tb.probe(config)
        }
        .expect("bring-up");
        let pd = dev.alloc_pd().unwrap();
        let ch = events.then(|| dev.create_comp_channel().unwrap());
        let cq = dev.create_cq(1024, CQ_CONTEXT, ch.as_ref()).unwrap();
        let (mut qp, _) = dev
            .create_qp(
                &pd,
                &QpInitAttr {
                    qp_type,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 512,
                        max_recv_wr: 512,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data,
                    },
                    sq_sig_all: true,
                },
            )
            .unwrap();
        let a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: QKEY,
            ..Default::default()
        };
        dev.modify_qp(&mut qp, &a, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)
            .unwrap();
        let a = QpAttr {
            qp_state: QpState::Rtr,
            ..Default::default()
        };
        dev.modify_qp(&mut qp, &a, M::STATE).unwrap();
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0,
            ..Default::default()
        };
        dev.modify_qp(&mut qp, &a, M::STATE | M::SQ_PSN).unwrap();
        let buf = dev.alloc_buf(BUF).unwrap();
        let mr = dev
            .reg_mr(
                &pd,
                buf,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        Node {
            tb,
            dev,
            pd,
            cq,
            qp,
            mr,
            ah: None,
            ch,
        }
    }

    fn gid(&self) -> Gid {
        self.dev.query_gid(1, 0).unwrap()
    }

    /// An AH to `peer`.
    fn connect(&mut self, peer: &Node) {
        let ah = self
            .dev
            .create_ah(
                &self.pd,
                &AhAttr {
                    dgid: peer.gid(),
                    port_num: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        self.ah = Some(ah);
    }

    fn buf(&self) -> &verbs::Buffer {
        self.mr.buffer().unwrap()
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// Posts `n` receives of `len` bytes at `off + i * len`.
    fn post_recvs(&mut self, off: u64, len: u32, n: u64) {
        for i in 0..n {
            let sge = [self.sge(off + i * u64::from(len), len)];
            self.dev
                .post_recv(
                    &mut self.qp,
                    &[RecvWr {
                        wr_id: 1000 + i,
                        sg_list: &sge,
                    }],
                )
                .unwrap();
        }
    }

    fn teardown(self) {
        let Node {
            tb,
            dev,
            pd,
            cq,
            qp,
            mr,
            ah,
            ch,
        } = self;
        dev.destroy_qp(qp).unwrap();
        if let Some(ah) = ah {
            dev.destroy_ah(ah).unwrap();
        }
        dev.dereg_mr(mr).unwrap();
        dev.destroy_cq(cq).unwrap();
        if let Some(ch) = ch {
            dev.destroy_comp_channel(ch).unwrap();
        }
        dev.dealloc_pd(pd).unwrap();
        dev.shutdown().unwrap();
        assert_eq!(tb.live(), Default::default());
        assert_eq!(tb.device().errors(), &[]);
    }
}

/// The destination `$b` as seen from `$a` (a macro: it borrows only `$a.ah`, so that
/// `$a.qp` can be posted to meanwhile).
macro_rules! dest {
    ($a:expr, $b:expr, $qkey:expr) => {
        UdDest {
            ah: $a.ah.as_ref().unwrap(),
            remote_qpn: $b.qp.qp_num(),
            remote_qkey: $qkey,
        }
    };
}

fn pair(seed: u64, qp_type: QpType) -> (Arc<World>, Node, Node) {
    pair_with(seed, qp_type, false)
}

/// [`pair`], both BAR2s mapped as memory when `mapped`.
fn pair_with(seed: u64, qp_type: QpType, mapped: bool) -> (Arc<World>, Node, Node) {
    let w = World::new(seed);
    let mut a = Node::with(&w, Ipv4Addr::new(127, 0, 1, 1), qp_type, mapped);
    let mut b = Node::with(&w, Ipv4Addr::new(127, 0, 1, 2), qp_type, mapped);
    a.connect(&b);
    b.connect(&a);
    (w, a, b)
}

/// Polls `node`'s CQ, running the world, until `n` completions came (panics after a bound).
fn wait(w: &World, node: &Node, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 32];
    for _ in 0..2_000_000 {
        let k = node.dev.poll_cq(&node.cq, &mut wc).unwrap();
        out.extend_from_slice(&wc[..k]);
        if out.len() >= n {
            assert_eq!(out.len(), n, "more completions than expected");
            return out;
        }
        w.relax();
    }
    panic!("{} of {n} completions", out.len());
}

/// Runs the world until nothing is in flight, then checks no completion is left.
fn settle(w: &World, nodes: &[&Node]) {
    for _ in 0..100_000 {
        if nodes.iter().all(|n| n.tb.device().srd_in_flight() == 0) && w.fabric().in_flight() == 0 {
            break;
        }
        w.relax();
    }
    let mut wc = [WorkCompletion::default(); 4];
    for n in nodes {
        assert_eq!(n.dev.poll_cq(&n.cq, &mut wc).unwrap(), 0);
    }
}

#[test]
fn ud_send_recv_and_qkey_mismatch_is_dropped() {
    let (w, mut a, mut b) = pair(1, QpType::Ud);
    b.post_recvs(0, 256, 4);
    a.buf().write(0, b"hello over UD").unwrap();
    let sge = [a.sge(0, 13)];
    // The wrong Q_Key: sent, completed at the sender, dropped by the receiver.
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sge,
        dest: Some(dest!(a, b, 0x2222)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    let c = wait(&w, &a, 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    settle(&w, &[&a, &b]);
    assert_eq!(b.tb.device().data_stats().rx_qkey_mismatch, 1);

    // The right one (and immediate data): delivered.
    let wr = SendWr {
        wr_id: 2,
        opcode: WrOpcode::SendWithImm,
        imm_data: 0x1234_5678u32.to_be(),
        sg_list: &sge,
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    assert_eq!(wait(&w, &a, 1)[0].status, WcStatus::Success);
    let r = wait(&w, &b, 1);
    assert_eq!(r[0].wr_id, 1000);
    assert_eq!(r[0].status, WcStatus::Success);
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    assert_eq!(r[0].byte_len, 13);
    assert_eq!(r[0].src_qp, a.qp.qp_num());
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(r[0].imm_data, 0x1234_5678u32.to_be());
    let mut got = [0u8; 13];
    b.buf().read(0, &mut got).unwrap();
    assert_eq!(&got, b"hello over UD");

    // Inline, with the QP's own Q_Key (bit 31).
    let wr = SendWr {
        wr_id: 3,
        flags: SendFlags::INLINE,
        inline_data: b"inline!",
        dest: Some(dest!(a, b, 0x8000_0000)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    wait(&w, &a, 1);
    let r = wait(&w, &b, 1);
    assert_eq!((r[0].wr_id, r[0].byte_len), (1001, 7));
    let mut got = [0u8; 7];
    b.buf().read(256, &mut got).unwrap();
    assert_eq!(&got, b"inline!");

    // RDMA on UD, atomics: not on EFA.
    let rd = SendWr {
        wr_id: 4,
        opcode: WrOpcode::RdmaRead,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    let e = a.dev.post_send(&mut a.qp, &[rd]).unwrap_err();
    assert_eq!((e.error, e.bad_wr), (Error::NotSupported, 0));
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

#[test]
fn srd_send_recv_with_immediate() {
    let (w, mut a, mut b) = pair(2, QpType::Srd);
    b.post_recvs(0, 8928, 8);
    let sizes = [0u32, 1, 32, 4096, 8928];
    for (i, &n) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..n).map(|j| (j as u8) ^ (i as u8 * 31)).collect();
        a.buf().write(0, &data).unwrap();
        let sge = [a.sge(0, n)];
        let wr = SendWr {
            wr_id: i as u64,
            opcode: WrOpcode::SendWithImm,
            imm_data: (i as u32).to_be(),
            sg_list: if n == 0 { &[] } else { &sge },
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        a.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = wait(&w, &a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (i as u64, WcStatus::Success));
        let r = wait(&w, &b, 1);
        assert_eq!(r[0].wr_id, 1000 + i as u64);
        assert_eq!(r[0].byte_len, n);
        assert_eq!(r[0].imm_data, (i as u32).to_be());
        let mut got = vec![0u8; n as usize];
        b.buf().read(i * 8928, &mut got).unwrap();
        assert_eq!(got, data, "size {n}");
    }
    // Larger than the MTU: refused by the driver.
    let sge = [a.sge(0, 8929)];
    let wr = SendWr {
        sg_list: &sge,
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    assert_eq!(
        a.dev.post_send(&mut a.qp, &[wr]).unwrap_err().error,
        Error::InvalidArgument
    );
    // Atomics do not exist on EFA (write with immediate does where the device has RDMA
    // write: `srd_rdma_write_with_immediate_consumes_a_receive`).
    for op in [WrOpcode::AtomicFetchAndAdd, WrOpcode::AtomicCmpAndSwp] {
        let wr = SendWr {
            opcode: op,
            sg_list: &sge,
            remote: RemoteOp::Rdma {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        assert_eq!(
            a.dev.post_send(&mut a.qp, &[wr]).unwrap_err().error,
            Error::NotSupported
        );
    }
    // Nor SEND with invalidate.
    let small = [a.sge(0, 4)];
    let wr = SendWr {
        opcode: WrOpcode::SendWithInv,
        sg_list: &small,
        imm_data: b.mr.rkey(),
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    assert_eq!(
        a.dev.post_send(&mut a.qp, &[wr]).unwrap_err().error,
        Error::NotSupported
    );
    // A wrong Q_Key on SRD: the sender learns it (bad destination QPN), nothing delivered.
    let sge = [a.sge(0, 4)];
    let wr = SendWr {
        wr_id: 77,
        sg_list: &sge,
        dest: Some(dest!(a, b, 0x9999)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    let c = wait(&w, &a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (77, WcStatus::RemInvRdReqErr));
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

/// A read of `len` bytes from `b` into `a` at offset `off`, checked byte for byte.
fn read_and_check(w: &World, a: &mut Node, b: &Node, len: u32, seed: u8) {
    let data: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(7) ^ seed).collect();
    b.buf().write(4096, &data).unwrap();
    a.buf().fill(0, len as usize, 0xee).unwrap();
    let sge = [a.sge(0, len)];
    let wr = SendWr {
        wr_id: u64::from(len),
        opcode: WrOpcode::RdmaRead,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: b.mr.addr() + 4096,
            rkey: b.mr.rkey(),
        },
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    let c = wait(w, a, 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode, c[0].byte_len),
        (u64::from(len), WcStatus::Success, WcOpcode::RdmaRead, len)
    );
    let mut got = vec![0u8; len as usize];
    a.buf().read(0, &mut got).unwrap();
    assert!(got == data, "read of {len} bytes differs");
}

const SIZES: [u32; 9] = [1, 63, 64, 4095, 4096, 8928, 8929, 65536, 1 << 20];

#[test]
fn srd_rdma_read_and_write_of_every_size_class() {
    let (w, mut a, b) = pair(3, QpType::Srd);
    for (i, &len) in SIZES.iter().enumerate() {
        read_and_check(&w, &mut a, &b, len, i as u8);
    }
    // Writes: a → b.
    for (i, &len) in SIZES.iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|j| (j as u8) ^ (i as u8 + 1)).collect();
        a.buf().write(0, &data).unwrap();
        let sge = [a.sge(0, len)];
        let wr = SendWr {
            wr_id: 5000 + i as u64,
            opcode: WrOpcode::RdmaWrite,
            sg_list: &sge,
            remote: RemoteOp::Rdma {
                remote_addr: b.mr.addr() + 8192,
                rkey: b.mr.rkey(),
            },
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        a.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = wait(&w, &a, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status, c[0].opcode),
            (5000 + i as u64, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0u8; len as usize];
        b.buf().read(8192, &mut got).unwrap();
        assert!(got == data, "write of {len} bytes differs");
    }
    // A read beyond the remote region: a remote access error.
    let sge = [a.sge(0, 64)];
    let wr = SendWr {
        wr_id: 9,
        opcode: WrOpcode::RdmaRead,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: b.mr.addr() + BUF as u64 - 32,
            rkey: b.mr.rkey(),
        },
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    assert_eq!(wait(&w, &a, 1)[0].status, WcStatus::RemAccessErr);
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

#[test]
fn srd_delivers_every_message_exactly_once_over_a_lossy_fabric() {
    exactly_once_over_a_lossy_fabric(false);
}

/// The same with the LLQs mapped: every WQE of the one-SGE SEND fast path is stored straight
/// into BAR memory (what a mapped write-combining BAR takes), and still every message arrives
/// once with its length and number.
#[test]
fn srd_exactly_once_with_wqes_stored_into_a_mapped_llq() {
    exactly_once_over_a_lossy_fabric(true);
}

fn exactly_once_over_a_lossy_fabric(mapped: bool) {
    let (w, mut a, mut b) = pair_with(4, QpType::Srd, mapped);
    w.fabric().set_faults(FaultConfig {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        ..FaultConfig::NONE
    });
    const N: u64 = 400;
    b.post_recvs(0, 64, 500);
    // Post in batches the SQ can hold; each message carries its number.
    let mut sent = 0;
    let mut done = Vec::new();
    while sent < N {
        let k = (N - sent).min(100);
        for i in sent..sent + k {
            a.buf().write_u64((i * 64) as usize, i).unwrap();
        }
        let sges: Vec<[Sge; 1]> = (sent..sent + k)
            .map(|i| [a.sge(i * 64, 8 + (i % 50) as u32)])
            .collect();
        let wrs: Vec<SendWr<'_, efa::Ah>> = (0..k as usize)
            .map(|j| SendWr {
                wr_id: sent + j as u64,
                sg_list: &sges[j],
                dest: Some(dest!(a, b, QKEY)),
                ..Default::default()
            })
            .collect();
        a.dev.post_send(&mut a.qp, &wrs).unwrap();
        done.extend(wait(&w, &a, k as usize));
        sent += k;
    }
    // Every send completed once, successfully (in whatever order SRD reports them).
    let mut ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
    assert!(done.iter().all(|c| c.status == WcStatus::Success));
    ids.sort_unstable();
    assert_eq!(ids, (0..N).collect::<Vec<_>>());
    // Every message arrived exactly once.
    let got = wait(&w, &b, N as usize);
    let mut seen: Vec<u64> = got
        .iter()
        .map(|c| {
            assert_eq!(c.status, WcStatus::Success);
            let slot = c.wr_id - 1000;
            let v = b.buf().read_u64((slot * 64) as usize).unwrap();
            assert_eq!(u64::from(c.byte_len), 8 + v % 50);
            v
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..N).collect::<Vec<_>>());
    let stats = w.fabric().stats();
    assert!(stats.dropped_loss > 0 && stats.duplicated > 0 && stats.reordered > 0);
    assert!(a.tb.device().data_stats().retransmits > 0);
    let peak = a.tb.device().data_stats().srd_window_peak;
    assert!(
        (1..=u64::from(nic_emulator::efa::SRD_WINDOW_MAX)).contains(&peak),
        "{peak}"
    );
    // Reads too, through the same faults.
    for (i, &len) in [64u32, 8929, 65536].iter().enumerate() {
        read_and_check(&w, &mut a, &b, len, 0x40 + i as u8);
    }
    w.fabric().set_faults(FaultConfig::NONE);
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

/// SRD's send window: a deep queue of large writes, then of large reads, completes whole
/// through a receive buffer of 24 frames at each end (less than the first window) on a
/// fabric that also loses 5% of the frames. What is unacknowledged never exceeds the
/// window; the buffer overflowed at first and the window was halved for it.
#[test]
fn srd_paces_a_deep_queue_of_large_operations_through_a_tiny_receive_buffer() {
    use nic_emulator::efa::{SRD_WINDOW_INIT, SRD_WINDOW_MAX};
    let (w, mut a, b) = pair(8, QpType::Srd);
    for n in [&a, &b] {
        n.tb.device().faults().rx_buffer_frames = Some(24);
    }
    const { assert!(24 < SRD_WINDOW_INIT) };
    w.fabric().set_faults(FaultConfig {
        loss: 0.05,
        ..FaultConfig::NONE
    });
    const LEN: u32 = 128 << 10;
    const N: u64 = 8;
    let half = (BUF / 2) as u64;
    let pattern = |k: u64| -> Vec<u8> {
        (0..LEN)
            .map(|j| (j as u8).wrapping_mul(7) ^ (k as u8))
            .collect()
    };
    // Writes: a[k·LEN] → b[half + k·LEN], all posted at once.
    for k in 0..N {
        a.buf()
            .write((k * u64::from(LEN)) as usize, &pattern(k))
            .unwrap();
    }
    // N operations of `op`, all posted at once: a[local + k·LEN] with b[half + k·LEN].
    let batch = |a: &mut Node, op: WrOpcode, local: u64, id: u64| {
        let sges: Vec<[Sge; 1]> = (0..N)
            .map(|k| [a.sge(local + k * u64::from(LEN), LEN)])
            .collect();
        let wrs: Vec<SendWr<'_, efa::Ah>> = (0..N as usize)
            .map(|k| SendWr {
                wr_id: id + k as u64,
                opcode: op,
                sg_list: &sges[k],
                remote: RemoteOp::Rdma {
                    remote_addr: b.mr.addr() + half + k as u64 * u64::from(LEN),
                    rkey: b.mr.rkey(),
                },
                dest: Some(dest!(a, b, QKEY)),
                ..Default::default()
            })
            .collect();
        a.dev.post_send(&mut a.qp, &wrs).unwrap();
        let c = wait(&w, a, N as usize);
        assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    };
    batch(&mut a, WrOpcode::RdmaWrite, 0, 0);
    for k in 0..N {
        let mut got = vec![0u8; LEN as usize];
        b.buf()
            .read((half + k * u64::from(LEN)) as usize, &mut got)
            .unwrap();
        assert!(got == pattern(k), "write {k} differs");
    }
    // Reads: b[half + k·LEN] → a[half + k·LEN], all posted at once.
    batch(&mut a, WrOpcode::RdmaRead, half, 100);
    for k in 0..N {
        let mut got = vec![0u8; LEN as usize];
        a.buf()
            .read((half + k * u64::from(LEN)) as usize, &mut got)
            .unwrap();
        assert!(got == pattern(k), "read {k} differs");
    }
    let (sa, sb) = (a.tb.device().data_stats(), b.tb.device().data_stats());
    // Without a window the queue of writes put all its packets on the wire at once.
    let burst = N * u64::from(LEN.div_ceil(Profile::default().mtu));
    assert!(
        (1..=u64::from(SRD_WINDOW_MAX)).contains(&sa.srd_window_peak) && sa.srd_window_peak < burst,
        "{sa:?}"
    );
    assert!(sa.rx_overflow + sb.rx_overflow > 0, "{sa:?} {sb:?}");
    assert!(sa.srd_window_cuts > 0 && sa.retransmits > 0, "{sa:?}");
    for n in [&a, &b] {
        n.tb.device().faults().rx_buffer_frames = None;
    }
    w.fabric().set_faults(FaultConfig::NONE);
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

#[test]
fn srd_without_a_posted_receive_fails_with_rnr_and_unreachable_peers_time_out() {
    let (w, mut a, b) = pair(5, QpType::Srd);
    let sge = [a.sge(0, 16)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sge,
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    assert_eq!(wait(&w, &a, 1)[0].status, WcStatus::RnrRetryExcErr);
    // A cut link: the device retransmits, then gives up.
    w.fabric().cut_link(
        a.tb.device().port_addr().unwrap(),
        b.tb.device().port_addr().unwrap(),
    );
    let wr = SendWr {
        wr_id: 2,
        sg_list: &sge,
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    assert_eq!(wait(&w, &a, 1)[0].status, WcStatus::RespTimeoutErr);
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

/// Writes a 16-byte completion entry into slot `slot` of `node`'s CQ with the phase of the
/// ring's first pass, as a misbehaving device would.
fn forge_cqe(node: &Node, slot: u64, e: [u8; 16]) {
    use nic_emulator::AddressSpace;
    let view = nic_testbed::IommuView(node.tb.dma.clone());
    let at = node.cq.ring_addr() + slot * u64::from(node.cq.entry_size());
    view.write(at, &e).unwrap();
}

#[test]
fn malformed_completions_are_refused_not_trusted() {
    let (w, mut a, b) = pair(6, QpType::Srd);
    let qpn = a.qp.qp_num() as u16;
    let mut wc = [WorkCompletion::default(); 4];
    // flags: phase 1, queue type, op type.
    let entry = |req_id: u16, status: u8, q_type: u8, qpn: u16| {
        let mut e = [0u8; 16];
        e[0..2].copy_from_slice(&req_id.to_le_bytes());
        e[2] = status;
        e[3] = 1 | q_type << 1;
        e[4..6].copy_from_slice(&qpn.to_le_bytes());
        e
    };
    let cases = [
        // A send id nothing was posted with.
        (entry(3, 0, 1, qpn), efa::CqeFault::SendReqId(3)),
        // A QP the CQ does not serve.
        (entry(0, 0, 1, qpn + 7), efa::CqeFault::UnknownQp(qpn + 7)),
        // A receive when none is outstanding.
        (entry(0, 0, 2, qpn), efa::CqeFault::RecvReqId(0)),
        // An undefined status.
        (entry(0, 16, 1, qpn), efa::CqeFault::Status(16)),
        // No queue type.
        (entry(0, 0, 3, qpn), efa::CqeFault::QueueType(3)),
    ];
    for (i, (e, fault)) in cases.iter().enumerate() {
        forge_cqe(&a, i as u64, *e);
        assert_eq!(a.dev.poll_cq(&a.cq, &mut wc), Err(Error::Io), "case {i}");
        assert_eq!(a.dev.bad_cqes(), (i as u64 + 1, Some(*fault)));
    }
    // A receive longer than what was posted.
    a.post_recvs(0, 16, 1);
    let mut e = entry(0, 0, 2, qpn);
    e[6..8].copy_from_slice(&17u16.to_le_bytes());
    forge_cqe(&a, 5, e);
    assert_eq!(a.dev.poll_cq(&a.cq, &mut wc), Err(Error::Io));
    assert_eq!(a.dev.bad_cqes().1, Some(efa::CqeFault::Length(17)));
    // Each refused entry was consumed once: the ring is empty again.
    assert_eq!(a.dev.poll_cq(&a.cq, &mut wc), Ok(0));
    assert_eq!(a.dev.bad_cqes().0, 6);
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

#[test]
fn the_device_refuses_driver_mistakes_on_the_data_path() {
    use nic_emulator::efa::DeviceError;
    use nic_hal::RegisterIo;
    let (w, a, b) = pair(7, QpType::Srd);
    let qpn = a.qp.qp_num() as u16;
    let (sq_db, rq_db) = a.qp.db_offsets();
    let db = a.tb.bar(a.dev.attributes().db_bar as u8);
    // An SQ doorbell for a WQE never written: on the first pass the zeroed slot has the
    // expected phase (0), so the meta-descriptor check refuses it; it completes with an
    // error for a request id the driver never handed out.
    db.write32(sq_db as usize, 1);
    // An RQ doorbell far beyond the ring.
    db.write32(rq_db as usize, 0x7fff);
    // A BAR2 write outside every LLQ.
    a.tb.bar(nic_emulator::efa::MEM_BAR)
        .write_block(0x7fff_0000, &[0; 64]);
    // A doorbell naming no queue.
    db.write32(0x8000 * 8, 1);
    let errors = a.tb.device().errors().to_vec();
    assert_eq!(
        errors,
        vec![
            DeviceError::BadWqe {
                qpn,
                reason: "meta descriptor flags"
            },
            DeviceError::ProducerAhead {
                qpn,
                producer: 0x7fff,
                consumer: 0
            },
            DeviceError::BadLlqWrite {
                offset: 0x7fff_0000,
                len: 64
            },
            DeviceError::BadDoorbell {
                offset: 0x8000 * 8,
                value: 1
            },
        ]
    );
    assert_eq!(a.tb.device().data_stats().tx_frames, 0);
    let mut wc = [WorkCompletion::default(); 2];
    assert_eq!(a.dev.poll_cq(&a.cq, &mut wc), Err(Error::Io));
    assert_eq!(a.dev.bad_cqes(), (1, Some(efa::CqeFault::SendReqId(0))));
    settle(&w, &[&a, &b]);
    // Teardown checks for device errors: this test made them on purpose.
    let Node {
        tb,
        dev,
        pd,
        cq,
        qp,
        mr,
        ah,
        ch: _,
    } = a;
    dev.destroy_qp(qp).unwrap();
    dev.destroy_ah(ah.unwrap()).unwrap();
    dev.dereg_mr(mr).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), Default::default());
    b.teardown();
}

/// A list with a refused WR in the middle: the WRs before it are posted (and rung), the
/// refused one and those after it are not; `bad_wr` names it. On both LLQ paths (stored into
/// the mapped BAR and written through the trapped one), for an SGE-less, a too-long and an
/// atomic WR.
#[test]
fn a_refused_wr_stops_the_list_after_posting_the_ones_before_it() {
    for mapped in [false, true] {
        let (w, mut a, mut b) = pair_with(9, QpType::Srd, mapped);
        b.post_recvs(0, 256, 8);
        let good = [a.sge(0, 64)];
        let long = [a.sge(0, 9000)];
        let ok = |id| SendWr {
            wr_id: id,
            sg_list: &good,
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        let bad = [
            (
                SendWr {
                    wr_id: 90,
                    sg_list: &long,
                    dest: Some(dest!(a, b, QKEY)),
                    ..Default::default()
                },
                Error::InvalidArgument,
            ),
            (
                SendWr {
                    wr_id: 91,
                    dest: None,
                    ..ok(91)
                },
                Error::InvalidArgument,
            ),
            (
                SendWr {
                    wr_id: 92,
                    opcode: WrOpcode::AtomicFetchAndAdd,
                    ..ok(92)
                },
                Error::NotSupported,
            ),
        ];
        let mut id = 0;
        for (wr, err) in bad {
            let list = [ok(id), ok(id + 1), wr, ok(id + 2)];
            let e = a.dev.post_send(&mut a.qp, &list).unwrap_err();
            assert_eq!((e.error, e.bad_wr), (err, 2), "mapped: {mapped}");
            let c = wait(&w, &a, 2);
            let mut ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
            ids.sort_unstable();
            assert_eq!(ids, [id, id + 1], "mapped: {mapped}");
            assert!(c.iter().all(|c| c.status == WcStatus::Success));
            wait(&w, &b, 2);
            id += 3;
        }
        settle(&w, &[&a, &b]);
        a.teardown();
        b.teardown();
    }
}

/// Sender `a` (CQ without a channel) and receiver `b` (CQ on a completion channel).
fn event_pair(seed: u64) -> (Arc<World>, Node, Node) {
    let w = World::new(seed);
    let mut a = Node::build(&w, Ipv4Addr::new(127, 0, 2, 1), QpType::Srd, true, false);
    let mut b = Node::build(&w, Ipv4Addr::new(127, 0, 2, 2), QpType::Srd, true, true);
    a.connect(&b);
    b.connect(&a);
    (w, a, b)
}

/// `a` sends 64 bytes to `b`; returns once `b` polled the receive.
fn send_one(w: &World, a: &mut Node, b: &Node, id: u64) {
    let sge = [a.sge(0, 64)];
    let wr = SendWr {
        wr_id: id,
        sg_list: &sge,
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    assert_eq!(wait(w, a, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(w, b, 1)[0].status, WcStatus::Success);
}

/// A CQ on a channel raises nothing until armed; an armed one gives one EQE for its next
/// completion and is disarmed; the EQ raises its vector only while armed (the driver re-arms
/// it when it finds the ring empty); events are counted by the device, the channel and the
/// CQ; the arming rules the driver enforces (not solicited-only, not a CQ without a channel,
/// no channel destroyed under its CQs).
#[test]
fn completion_events_come_only_from_an_armed_cq_and_raise_only_an_armed_eq() {
    let (w, mut a, mut b) = event_pair(11);
    b.post_recvs(0, 256, 16);
    let mut ch = b.ch.take().unwrap();
    let (eqn, v) = (ch.eqn(), ch.vector());
    assert_eq!(b.cq.eqn(), Some(eqn));
    assert!(v >= 1, "vector 0 is the admin queue's");
    let irq = b.tb.interrupts().clone();
    assert!(irq.is_enabled(v));
    let events = |b: &Node| b.tb.device().eq_events(eqn).unwrap();
    let base = irq.count(v);

    // Not armed: completions, no EQE, no interrupt, no event.
    send_one(&w, &mut a, &b, 1);
    assert_eq!(events(&b), 0);
    assert_eq!(irq.count(v), base);
    assert_eq!(b.dev.get_cq_event(&mut ch).unwrap(), None);

    // Armed: one EQE for the next completion, the vector raised (the EQ was armed at
    // creation), the CQ disarmed.
    b.dev.req_notify_cq(&b.cq, false).unwrap();
    assert_eq!(b.tb.device().cq_armed(b.cq.cqn() as u16), Some(true));
    send_one(&w, &mut a, &b, 2);
    assert_eq!(events(&b), 1);
    assert_eq!(irq.count(v), base + 1);
    assert_eq!(b.tb.device().cq_armed(b.cq.cqn() as u16), Some(false));
    let ev = b.dev.get_cq_event(&mut ch).unwrap().unwrap();
    assert_eq!((ev.cqn, ev.cq_context), (b.cq.cqn(), CQ_CONTEXT));
    assert_eq!(b.cq.events(), 1);
    // Nothing more: the ring is empty (and the EQ armed again).
    assert_eq!(b.dev.get_cq_event(&mut ch).unwrap(), None);
    assert_eq!(b.tb.device().eq_armed(eqn), Some(true));

    // Not re-armed: the next completion gives no event.
    send_one(&w, &mut a, &b, 3);
    assert_eq!(events(&b), 1);
    assert_eq!(irq.count(v), base + 1);

    // Armed twice without consuming in between: two EQEs, one interrupt (the EQ disarmed
    // itself at the first and nobody re-armed it).
    b.dev.req_notify_cq(&b.cq, false).unwrap();
    send_one(&w, &mut a, &b, 4);
    b.dev.req_notify_cq(&b.cq, false).unwrap();
    send_one(&w, &mut a, &b, 5);
    assert_eq!(events(&b), 3);
    assert_eq!(irq.count(v), base + 2);
    for _ in 0..2 {
        let ev = b.dev.get_cq_event(&mut ch).unwrap().unwrap();
        assert_eq!(ev.cqn, b.cq.cqn());
    }
    assert_eq!(b.dev.get_cq_event(&mut ch).unwrap(), None);
    assert_eq!((b.cq.events(), ch.events(), ch.stray_events()), (3, 3, 0));

    // What the driver refuses.
    assert_eq!(
        Provider::req_notify_cq(&b.dev, &b.cq, true).unwrap_err(),
        Error::NotSupported
    );
    assert_eq!(
        Provider::req_notify_cq(&a.dev, &a.cq, false).unwrap_err(),
        Error::InvalidArgument
    );
    let e = b.dev.destroy_comp_channel(ch).unwrap_err();
    assert_eq!(e.error, Error::Busy);
    b.ch = Some(e.object.unwrap());
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

/// A thread waiting for a completion event sleeps until the EQ's vector fires: the CQ is
/// armed, the waiter blocks in `wait_cq_event`, the other thread sends; the device raises
/// the vector and the waiter returns the event.
#[test]
fn a_thread_waiting_for_a_completion_event_is_woken_by_the_eq_vector() {
    let (w, mut a, mut b) = event_pair(12);
    b.post_recvs(0, 256, 4);
    let mut ch = b.ch.take().unwrap();
    let (eqn, v) = (ch.eqn(), ch.vector());
    let irq = b.tb.interrupts().clone();
    let before = irq.count(v);
    b.dev.req_notify_cq(&b.cq, false).unwrap();
    let ev = std::thread::scope(|s| {
        let (dev, ch) = (&b.dev, &mut ch);
        // An hour of the world's time: only the event ends this wait within the test.
        let waiter = s.spawn(move || dev.wait_cq_event(ch, 3_600_000_000_000));
        let sge = [a.sge(0, 64)];
        let wr = SendWr {
            wr_id: 7,
            sg_list: &sge,
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        a.dev.post_send(&mut a.qp, &[wr]).unwrap();
        for _ in 0..1_000_000 {
            if b.tb.device().eq_events(eqn) == Some(1) {
                break;
            }
            w.relax();
        }
        assert_eq!(b.tb.device().eq_events(eqn), Some(1));
        waiter.join().unwrap()
    });
    let ev = ev.unwrap().expect("the event");
    assert_eq!((ev.cqn, ev.cq_context), (b.cq.cqn(), CQ_CONTEXT));
    assert_eq!(irq.count(v), before + 1, "the vector fired once");
    assert_eq!(wait(&w, &a, 1)[0].wr_id, 7);
    assert_eq!(wait(&w, &b, 1)[0].status, WcStatus::Success);
    // Through the verbs trait too: no event pending, the wait times out (world time).
    assert_eq!(
        Provider::wait_cq_event(&b.dev, &mut ch, 1_000_000).unwrap(),
        None
    );
    b.ch = Some(ch);
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

/// A QP moved to ERR: the device completes every receive still posted with FLUSHED, in the
/// order posted (one completion per WR, whatever its SGE count), and nothing after them.
#[test]
fn a_qp_moved_to_err_flushes_its_posted_receives() {
    for qp_type in [QpType::Srd, QpType::Ud] {
        let (w, mut a, mut b) = pair(13, qp_type);
        b.post_recvs(0, 256, 3);
        // One WR of two SGEs.
        let sges = [b.sge(4096, 100), b.sge(8192, 100)];
        b.dev
            .post_recv(
                &mut b.qp,
                &[RecvWr {
                    wr_id: 2000,
                    sg_list: &sges,
                }],
            )
            .unwrap();
        // One of them is taken by a message first.
        send_one_to(&w, &mut a, &b);
        let got = wait(&w, &b, 1);
        assert_eq!((got[0].wr_id, got[0].status), (1000, WcStatus::Success));
        let err = QpAttr {
            qp_state: QpState::Err,
            ..Default::default()
        };
        b.dev.modify_qp(&mut b.qp, &err, M::STATE).unwrap();
        let c = wait(&w, &b, 3);
        let ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, [1001, 1002, 2000], "{qp_type:?}");
        assert!(c.iter().all(|c| c.status == WcStatus::WrFlushErr), "{c:?}");
        // Posting to a QP in ERR: EINVAL.
        let sge = [b.sge(0, 64)];
        let e = b
            .dev
            .post_recv(
                &mut b.qp,
                &[RecvWr {
                    wr_id: 9,
                    sg_list: &sge,
                }],
            )
            .unwrap_err();
        assert_eq!((e.error, e.bad_wr), (Error::InvalidArgument, 0));
        settle(&w, &[&a, &b]);
        a.teardown();
        b.teardown();
    }
}

/// `a` sends 64 bytes to `b` and waits for the send's completion.
fn send_one_to(w: &World, a: &mut Node, b: &Node) {
    let sge = [a.sge(0, 64)];
    let qkey = QKEY;
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sge,
        dest: Some(dest!(a, b, qkey)),
        ..Default::default()
    };
    a.dev.post_send(&mut a.qp, &[wr]).unwrap();
    assert_eq!(wait(w, a, 1)[0].status, WcStatus::Success);
}

/// RDMA WRITE with immediate on SRD (the device has RDMA write): the data lands in the
/// peer's MR, the peer's oldest receive WR completes as `RecvRdmaWithImm` with the
/// immediate and the write's length (beyond 16 bits: `length_hi` of the extended entry), its
/// buffer untouched; the writer's completion is an RDMA write. On UD: EOPNOTSUPP.
#[test]
fn srd_rdma_write_with_immediate_consumes_a_receive() {
    for mapped in [false, true] {
        let (w, mut a, mut b) = pair_with(14, QpType::Srd, mapped);
        b.post_recvs(0, 256, 2);
        b.buf().fill(0, 256, 0xee).unwrap();
        let len = 70_000u32;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        a.buf().write(4096, &data).unwrap();
        let sge = [a.sge(4096, len)];
        let wr = SendWr {
            wr_id: 77,
            opcode: WrOpcode::RdmaWriteWithImm,
            imm_data: 0xfeed_f00du32.to_be(),
            sg_list: &sge,
            remote: RemoteOp::Rdma {
                remote_addr: b.mr.addr() + 8192,
                rkey: b.mr.rkey(),
            },
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        a.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = wait(&w, &a, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status, c[0].opcode),
            (77, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let r = wait(&w, &b, 1);
        assert_eq!(r[0].wr_id, 1000);
        assert_eq!(r[0].status, WcStatus::Success);
        assert_eq!(r[0].opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(r[0].byte_len, len);
        assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
        assert_eq!(r[0].imm_data, 0xfeed_f00du32.to_be());
        let mut got = vec![0u8; len as usize];
        b.buf().read(8192, &mut got).unwrap();
        assert!(got == data, "the written data");
        let mut rx = [0u8; 256];
        b.buf().read(0, &mut rx).unwrap();
        assert!(
            rx.iter().all(|&x| x == 0xee),
            "the receive buffer is untouched"
        );
        settle(&w, &[&a, &b]);
        a.teardown();
        b.teardown();
    }
    let (w, mut a, b) = pair(15, QpType::Ud);
    let sge = [a.sge(0, 64)];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWriteWithImm,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    let e = a.dev.post_send(&mut a.qp, &[wr]).unwrap_err();
    assert_eq!((e.error, e.bad_wr), (Error::NotSupported, 0));
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

/// Two SRD nodes on devices with 128-byte WQEs (`data_polling_128`), their BAR2s mapped when
/// `mapped`.
fn wide_pair(seed: u64, mapped: bool) -> (Arc<World>, Node, Node) {
    let w = World::new(seed);
    let p = Profile::default().with_wqe128();
    let ip = |n| Ipv4Addr::new(127, 0, 1, n);
    let mut a = Node::build_on(&w, ip(1), QpType::Srd, mapped, false, p.clone());
    let mut b = Node::build_on(&w, ip(2), QpType::Srd, mapped, false, p);
    a.connect(&b);
    b.connect(&a);
    (w, a, b)
}

/// With 128-byte WQEs: inline sends up to the 80 bytes such a WQE holds (81 refused), sends of
/// one and two SGEs (with immediate), enough sends to wrap the SQ twice, SRD RDMA reads and
/// writes, and no device error (the emulated device records any WQE of the wrong size).
fn wqe128_data_path(mapped: bool) {
    let (w, mut a, mut b) = wide_pair(7, mapped);
    assert_eq!(a.dev.attributes().tx_wqe_size(), 128);
    let attr = a.dev.query_device().unwrap();
    assert_eq!(attr.max_inline_data, 80);
    assert_eq!(a.qp.cap().max_inline_data, 80);
    // One receive for each of the five sends before the loop below.
    b.post_recvs(0, 256, 5);
    // Inline at the new limit, and just under the old one's double.
    for (i, n) in [80usize, 33, 1].into_iter().enumerate() {
        let data: Vec<u8> = (0..n)
            .map(|j| (j as u8).wrapping_mul(13) ^ i as u8)
            .collect();
        let wr = SendWr {
            wr_id: i as u64,
            opcode: WrOpcode::SendWithImm,
            imm_data: (0x100 + i as u32).to_be(),
            flags: SendFlags::INLINE,
            inline_data: &data,
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        a.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = wait(&w, &a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (i as u64, WcStatus::Success));
        let r = wait(&w, &b, 1);
        assert_eq!((r[0].wr_id, r[0].byte_len), (1000 + i as u64, n as u32));
        assert_eq!(r[0].imm_data, (0x100 + i as u32).to_be());
        let mut got = vec![0u8; n];
        b.buf().read(i * 256, &mut got).unwrap();
        assert_eq!(got, data, "inline {n}");
    }
    // One byte past the limit: refused before anything reaches the device.
    let big = [0u8; 81];
    let wr = SendWr {
        flags: SendFlags::INLINE,
        inline_data: &big,
        dest: Some(dest!(a, b, QKEY)),
        ..Default::default()
    };
    let e = a.dev.post_send(&mut a.qp, &[wr]).unwrap_err();
    assert_eq!((e.error, e.bad_wr), (Error::InvalidArgument, 0));
    // Two SGEs, then one.
    a.buf().write(0, b"first part|").unwrap();
    a.buf().write(4096, b"second part").unwrap();
    let two = [a.sge(0, 11), a.sge(4096, 11)];
    let one = [a.sge(4096, 6)];
    let wrs = [
        SendWr {
            wr_id: 10,
            sg_list: &two,
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        },
        SendWr {
            wr_id: 11,
            sg_list: &one,
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        },
    ];
    a.dev.post_send(&mut a.qp, &wrs).unwrap();
    let mut c: Vec<u64> = wait(&w, &a, 2).iter().map(|c| c.wr_id).collect();
    c.sort_unstable();
    assert_eq!(c, [10, 11]);
    let mut r = wait(&w, &b, 2);
    r.sort_by_key(|c| c.wr_id);
    assert_eq!((r[0].wr_id, r[0].byte_len), (1003, 22));
    assert_eq!((r[1].wr_id, r[1].byte_len), (1004, 6));
    let mut got = [0u8; 22];
    b.buf().read(3 * 256, &mut got).unwrap();
    assert_eq!(&got, b"first part|second part");
    let mut got = [0u8; 6];
    b.buf().read(4 * 256, &mut got).unwrap();
    assert_eq!(&got, b"second");
    // More sends than two passes of the SQ (512 WQEs of 128 bytes), in lists of 100: every
    // slot and both phases.
    const N: u64 = 1100;
    let mut sent = 0;
    while sent < N {
        let k = (N - sent).min(100);
        b.post_recvs(8192, 64, k);
        for i in sent..sent + k {
            a.buf()
                .write_u64((8192 + (i % 100) * 64) as usize, i)
                .unwrap();
        }
        let sges: Vec<[Sge; 1]> = (sent..sent + k)
            .map(|i| [a.sge(8192 + (i % 100) * 64, 8)])
            .collect();
        let wrs: Vec<SendWr<'_, efa::Ah>> = (0..k as usize)
            .map(|j| SendWr {
                wr_id: sent + j as u64,
                sg_list: &sges[j],
                dest: Some(dest!(a, b, QKEY)),
                ..Default::default()
            })
            .collect();
        a.dev.post_send(&mut a.qp, &wrs).unwrap();
        let done = wait(&w, &a, k as usize);
        assert!(done.iter().all(|c| c.status == WcStatus::Success));
        let got = wait(&w, &b, k as usize);
        let mut seen: Vec<u64> = got
            .iter()
            .map(|c| {
                assert_eq!((c.status, c.byte_len), (WcStatus::Success, 8));
                b.buf()
                    .read_u64((8192 + (c.wr_id - 1000) * 64) as usize)
                    .unwrap()
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (sent..sent + k).collect::<Vec<_>>());
        sent += k;
    }
    // SRD RDMA read and write.
    for (i, &len) in [1u32, 64, 8929, 65536].iter().enumerate() {
        read_and_check(&w, &mut a, &b, len, 0x60 + i as u8);
        let data: Vec<u8> = (0..len).map(|j| (j as u8) ^ (0x70 + i as u8)).collect();
        a.buf().write(0, &data).unwrap();
        let sge = [a.sge(0, len)];
        let wr = SendWr {
            wr_id: 7000 + i as u64,
            opcode: WrOpcode::RdmaWrite,
            sg_list: &sge,
            remote: RemoteOp::Rdma {
                remote_addr: b.mr.addr() + (1 << 20),
                rkey: b.mr.rkey(),
            },
            dest: Some(dest!(a, b, QKEY)),
            ..Default::default()
        };
        a.dev.post_send(&mut a.qp, &[wr]).unwrap();
        let c = wait(&w, &a, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status, c[0].opcode),
            (7000 + i as u64, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0u8; len as usize];
        b.buf().read(1 << 20, &mut got).unwrap();
        assert!(got == data, "write of {len} bytes differs");
    }
    settle(&w, &[&a, &b]);
    a.teardown();
    b.teardown();
}

#[test]
fn srd_with_128_byte_wqes_through_trapped_llq_writes() {
    wqe128_data_path(false);
}

#[test]
fn srd_with_128_byte_wqes_stored_into_a_mapped_llq() {
    wqe128_data_path(true);
}
