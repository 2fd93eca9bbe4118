//! The driver's data path against the emulated device, through the verbs provider: RC
//! send/receive, RDMA write and read, atomics, selective signalling and error completions on
//! one NIC (loopback) and between two NICs on the fabric; UD with an address handle;
//! completion events through a completion channel.

use std::net::Ipv4Addr;
use std::sync::Arc;

use mlx5::{Ah, Cq, Mr, Pd, Qp};
use nic_emulator::Profile;
use nic_testbed::{EmuDevice, Testbed, World};
use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Mtu, Provider, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, RemoteOp, SendFlags, SendWr, Sge, UdDest, WcFlags,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// One NIC's driver and the objects a test needs.
struct Node {
    tb: Testbed,
    dev: EmuDevice,
    pd: Pd,
    cq: Cq,
    mem: Buffer,
    mr: Mr,
    gid: Gid,
    mac: [u8; 6],
}

const MEM: usize = 64 * 1024;

fn node(tb: Testbed, config: mlx5::Config) -> Node {
    let dev = tb.probe(config).expect("probe");
    let gid = Gid::from_ipv4(tb.ip().octets());
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, gid.0, mac).unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 255, 1, None).unwrap();
    let mem = Provider::alloc_buf(&dev, MEM).unwrap();
    let mr = dev
        .reg_mr(
            &pd,
            mem.clone(),
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )
        .unwrap();
    Node {
        tb,
        dev,
        pd,
        cq,
        mem,
        mr,
        gid,
        mac,
    }
}

impl Node {
    fn qp(&self, qp_type: QpType, sig_all: bool) -> Qp {
        let (qp, _) = Provider::create_qp(
            &self.dev,
            &self.pd,
            &QpInitAttr {
                qp_type,
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 32,
                    max_recv_wr: 32,
                    max_send_sge: 2,
                    max_recv_sge: 2,
                    max_inline_data: 64,
                },
                sq_sig_all: sig_all,
            },
        )
        .unwrap();
        qp
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mem.addr() + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    fn write(&self, off: usize, data: &[u8]) {
        self.mem.write(off, data).unwrap();
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read(off, &mut v).unwrap();
        v
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer`'s QP `remote_qpn`.
    fn connect(&self, qp: &mut Qp, peer: &Node, remote_qpn: u32) {
        let p = verbs::rc::RcParams {
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ah_attr: AhAttr {
                dgid: peer.gid,
                sgid_index: 0,
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                dmac: peer.mac,
                ..AhAttr::default()
            },
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: remote_qpn,
            rq_psn: 0x100,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            sq_psn: 0x100,
            max_rd_atomic: 4,
            ..verbs::rc::RcParams::default()
        };
        verbs::rc::connect(&self.dev, qp, &p).unwrap();
    }
}

/// Polls `cq` until `n` completions arrived, running the world in between.
fn poll_n(world: &Arc<World>, dev: &EmuDevice, cq: &Cq, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 8];
    for _ in 0..100_000 {
        let k = Provider::poll_cq(dev, cq, &mut wc).expect("poll_cq");
        got.extend_from_slice(&wc[..k]);
        if got.len() >= n {
            return got;
        }
        world.relax();
    }
    panic!("only {} of {n} completions: {got:?}", got.len());
}

fn no_device_errors(n: &Node) {
    let errs = n.tb.device().errors().to_vec();
    assert!(errs.is_empty(), "device errors: {errs:?}");
}

fn wr<'a>(wr_id: u64, opcode: WrOpcode, sg: &'a [Sge]) -> SendWr<'a, Ah> {
    SendWr {
        wr_id,
        opcode,
        sg_list: sg,
        ..SendWr::default()
    }
}

fn loopback() -> (Arc<World>, Node) {
    let tb = Testbed::new(Profile::default());
    let world = tb.world().clone();
    (world, node(tb, mlx5::Config::default()))
}

#[test]
fn rc_loopback_send_write_read_atomics() {
    let (world, n) = loopback();
    let mut a = n.qp(QpType::Rc, false);
    let mut b = n.qp(QpType::Rc, false);
    let (qa, qb) = (a.qpn(), b.qpn());
    n.connect(&mut a, &n, qb);
    n.connect(&mut b, &n, qa);

    // SEND with immediate into a posted receive
    let msg: Vec<u8> = (0..200u8).collect();
    n.write(0, &msg);
    let rsg = [n.sge(4096, 1024)];
    Provider::post_recv(
        &n.dev,
        &mut b,
        &[RecvWr {
            wr_id: 0xb0,
            sg_list: &rsg,
        }],
    )
    .unwrap();
    let ssg = [n.sge(0, 200)];
    Provider::post_send(
        &n.dev,
        &mut a,
        &[SendWr {
            flags: SendFlags::SIGNALED,
            imm_data: 0x1234_5678u32.to_be(),
            ..wr(0xa0, WrOpcode::SendWithImm, &ssg)
        }],
    )
    .unwrap();
    let mut wc = poll_n(&world, &n.dev, &n.cq, 2);
    wc.sort_by_key(|w| w.wr_id);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].qp_num),
        (0xa0, WcStatus::Success, WcOpcode::Send, qa)
    );
    assert_eq!(
        (wc[1].wr_id, wc[1].status, wc[1].opcode, wc[1].byte_len),
        (0xb0, WcStatus::Success, WcOpcode::Recv, 200)
    );
    assert_eq!(wc[1].wc_flags, WcFlags::WITH_IMM);
    assert_eq!(u32::from_be(wc[1].imm_data), 0x1234_5678);
    assert_eq!(n.read(4096, 200), msg);

    // RDMA WRITE (unsignalled) then a signalled READ back: selective signalling
    n.write(8192, &[0xabu8; 300]);
    let wsg = [n.sge(8192, 300)];
    let dsg = [n.sge(16384, 300)];
    Provider::post_send(
        &n.dev,
        &mut a,
        &[
            SendWr {
                remote: RemoteOp::Rdma {
                    remote_addr: n.mem.addr() + 12288,
                    rkey: n.mr.rkey(),
                },
                ..wr(1, WrOpcode::RdmaWrite, &wsg)
            },
            SendWr {
                flags: SendFlags::SIGNALED,
                remote: RemoteOp::Rdma {
                    remote_addr: n.mem.addr() + 12288,
                    rkey: n.mr.rkey(),
                },
                ..wr(2, WrOpcode::RdmaRead, &dsg)
            },
        ],
    )
    .unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (2, WcStatus::Success, WcOpcode::RdmaRead, 300)
    );
    assert_eq!(n.read(12288, 300), vec![0xab; 300]);
    assert_eq!(n.read(16384, 300), vec![0xab; 300]);
    assert_eq!(a.sq_consumer(), a.sq_producer());

    // atomics: fetch-and-add then compare-and-swap on an 8-byte counter
    // The device computes on big-endian operands; the driver asks for host-endian atomic
    // responses (as Linux does), so the fetched values land in host order.
    n.write(20480, &5u64.to_be_bytes());
    let r1 = [n.sge(24576, 8)];
    let r2 = [n.sge(24584, 8)];
    let target = n.mem.addr() + 20480;
    Provider::post_send(
        &n.dev,
        &mut a,
        &[
            SendWr {
                flags: SendFlags::SIGNALED,
                remote: RemoteOp::Atomic {
                    remote_addr: target,
                    rkey: n.mr.rkey(),
                    compare_add: 10,
                    swap: 0,
                },
                ..wr(3, WrOpcode::AtomicFetchAndAdd, &r1)
            },
            SendWr {
                flags: SendFlags::SIGNALED,
                remote: RemoteOp::Atomic {
                    remote_addr: target,
                    rkey: n.mr.rkey(),
                    compare_add: 15,
                    swap: 99,
                },
                ..wr(4, WrOpcode::AtomicCmpAndSwp, &r2)
            },
        ],
    )
    .unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 2);
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (3, WcStatus::Success, WcOpcode::FetchAdd, 8),
            (4, WcStatus::Success, WcOpcode::CompSwap, 8)
        ]
    );
    let fetched = |off| u64::from_ne_bytes(n.read(off, 8).try_into().unwrap());
    let target = u64::from_be_bytes(n.read(20480, 8).try_into().unwrap());
    // FAA returned 5 and left 15; CAS saw 15, swapped in 99.
    assert_eq!((fetched(24576), fetched(24584), target), (5, 15, 99));

    // inline send
    Provider::post_recv(
        &n.dev,
        &mut b,
        &[RecvWr {
            wr_id: 0xb1,
            sg_list: &rsg,
        }],
    )
    .unwrap();
    Provider::post_send(
        &n.dev,
        &mut a,
        &[SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            inline_data: b"inline!",
            ..wr(5, WrOpcode::Send, &[])
        }],
    )
    .unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(n.read(4096, 7), b"inline!");

    // a 2-WQEBB WQE alone: a BlueFlame burst of two 64-byte blocks (ctrl + raddr + 68 bytes
    // of inline data = 7 units)
    assert!(a.blueflame());
    let payload = [0x3cu8; 64];
    Provider::post_send(
        &n.dev,
        &mut a,
        &[SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            inline_data: &payload,
            remote: RemoteOp::Rdma {
                remote_addr: n.mem.addr() + 32768,
                rkey: n.mr.rkey(),
            },
            ..wr(6, WrOpcode::RdmaWrite, &[])
        }],
    )
    .unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (6, WcStatus::Success));
    assert_eq!(n.read(32768, 64), payload);
    let bursts =
        n.tb.device()
            .uar_writes()
            .iter()
            .filter(|w| w.uar == a.uar() && w.data.len() == 64)
            .count();
    assert!(bursts >= 2, "BlueFlame blocks seen: {bursts}");
    assert_eq!(n.cq.bad_cqes().0, 0);
    no_device_errors(&n);

    Provider::destroy_qp(&n.dev, a).unwrap();
    Provider::destroy_qp(&n.dev, b).unwrap();
}

#[test]
fn rc_errors_complete_with_status_and_flush() {
    let (world, n) = loopback();
    let mut a = n.qp(QpType::Rc, false);
    let mut b = n.qp(QpType::Rc, false);
    let (qa, qb) = (a.qpn(), b.qpn());
    n.connect(&mut a, &n, qb);
    n.connect(&mut b, &n, qa);
    let sg = [n.sge(0, 64)];
    // a write with a bad rkey, then two more behind it (one unsignalled)
    let bad = SendWr {
        flags: SendFlags::SIGNALED,
        remote: RemoteOp::Rdma {
            remote_addr: n.mem.addr(),
            rkey: n.mr.rkey() ^ 0x7700,
        },
        ..wr(1, WrOpcode::RdmaWrite, &sg)
    };
    let next = SendWr {
        wr_id: 2,
        flags: SendFlags::empty(),
        ..bad
    };
    let last = SendWr { wr_id: 3, ..bad };
    Provider::post_send(&n.dev, &mut a, &[bad, next, last]).unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 3);
    assert_eq!(wc[0].wr_id, 1);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr, "{wc:?}");
    for w in &wc[1..] {
        assert_eq!(w.status, WcStatus::WrFlushErr, "{wc:?}");
    }
    assert_eq!(a.sq_consumer(), a.sq_producer());
    assert_eq!(n.cq.bad_cqes().0, 0);
    // the QP is in error on the device
    assert_eq!(
        Provider::query_qp(&n.dev, &a).unwrap().qp_state,
        QpState::Err
    );
    // posted receives of a QP moved to ERR are flushed too
    let rsg = [n.sge(4096, 64)];
    Provider::post_recv(
        &n.dev,
        &mut b,
        &[RecvWr {
            wr_id: 9,
            sg_list: &rsg,
        }],
    )
    .unwrap();
    Provider::modify_qp(
        &n.dev,
        &mut b,
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (9, WcStatus::WrFlushErr, WcOpcode::Recv)
    );
    Provider::destroy_qp(&n.dev, a).unwrap();
    Provider::destroy_qp(&n.dev, b).unwrap();
}

#[test]
fn two_nics_rc_and_ud_over_the_fabric() {
    let world = World::new(11);
    let n1 = node(
        world.nic(Ipv4Addr::new(127, 0, 0, 1), Profile::default()),
        mlx5::Config::default(),
    );
    let n2 = node(
        world.nic(Ipv4Addr::new(127, 0, 0, 2), Profile::default()),
        mlx5::Config::default(),
    );
    let mut a = n1.qp(QpType::Rc, true);
    let mut b = n2.qp(QpType::Rc, true);
    let (qa, qb) = (a.qpn(), b.qpn());
    n1.connect(&mut a, &n2, qb);
    n2.connect(&mut b, &n1, qa);

    // 16 receives, 16 sends of 3000 bytes (3 packets each at MTU 1024)
    let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    n1.write(0, &data);
    let rsg: Vec<[Sge; 1]> = (0..16).map(|i| [n2.sge(i * 3072, 3072)]).collect();
    let recvs: Vec<RecvWr<'_>> = (0..16)
        .map(|i| RecvWr {
            wr_id: 100 + i as u64,
            sg_list: &rsg[i],
        })
        .collect();
    Provider::post_recv(&n2.dev, &mut b, &recvs).unwrap();
    let ssg = [n1.sge(0, 3000)];
    let sends: Vec<SendWr<'_, Ah>> = (0..16).map(|i| wr(i, WrOpcode::Send, &ssg)).collect();
    Provider::post_send(&n1.dev, &mut a, &sends).unwrap();
    let sent = poll_n(&world, &n1.dev, &n1.cq, 16);
    let got = poll_n(&world, &n2.dev, &n2.cq, 16);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        got.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (100..116).collect::<Vec<_>>()
    );
    // (`src_qp` is defined for UD receives only.)
    assert!(got.iter().all(|w| w.byte_len == 3000));
    assert_eq!(n2.read(15 * 3072, 3000), data);

    // UD between the NICs: an AH on n1 for n2, 40 bytes of GRH in front of the payload
    let mut u1 = n1.qp(QpType::Ud, true);
    let mut u2 = n2.qp(QpType::Ud, true);
    for (n, q) in [(&n1, &mut u1), (&n2, &mut u2)] {
        let mut at = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: 0x1111_2222,
            ..QpAttr::default()
        };
        Provider::modify_qp(&n.dev, q, &at, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY).unwrap();
        at.qp_state = QpState::Rtr;
        Provider::modify_qp(&n.dev, q, &at, M::STATE).unwrap();
        at.qp_state = QpState::Rts;
        Provider::modify_qp(&n.dev, q, &at, M::STATE | M::SQ_PSN).unwrap();
    }
    let ah = Provider::create_ah(
        &n1.dev,
        &n1.pd,
        &AhAttr {
            dgid: n2.gid,
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: n2.mac,
            ..AhAttr::default()
        },
    )
    .unwrap();
    let grh_buf = [n2.sge(60000, 40 + 512)];
    Provider::post_recv(
        &n2.dev,
        &mut u2,
        &[RecvWr {
            wr_id: 7,
            sg_list: &grh_buf,
        }],
    )
    .unwrap();
    n1.write(50000, b"datagram");
    let usg = [n1.sge(50000, 8)];
    Provider::post_send(
        &n1.dev,
        &mut u1,
        &[SendWr {
            dest: Some(UdDest {
                ah: &ah,
                remote_qpn: u2.qpn(),
                remote_qkey: 0x8000_0000, // the QP's own Q_Key
            }),
            ..wr(8, WrOpcode::Send, &usg)
        }],
    )
    .unwrap();
    let s = poll_n(&world, &n1.dev, &n1.cq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (8, WcStatus::Success));
    let r = poll_n(&world, &n2.dev, &n2.cq, 1);
    assert_eq!((r[0].wr_id, r[0].status), (7, WcStatus::Success), "{r:?}");
    assert_eq!(r[0].byte_len, 40 + 8);
    assert_eq!(r[0].src_qp, u1.qpn());
    assert!(r[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(n2.read(60040, 8), b"datagram");
    for n in [&n1, &n2] {
        assert_eq!(n.cq.bad_cqes().0, 0);
        no_device_errors(n);
    }
}

#[test]
fn completion_channel_events() {
    let (world, n) = loopback();
    let mut ch = Provider::create_comp_channel(&n.dev).unwrap();
    let cq = Provider::create_cq(&n.dev, 63, 0x77, Some(&ch)).unwrap();
    let (mut a, _) = Provider::create_qp(
        &n.dev,
        &n.pd,
        &QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )
    .unwrap();
    let qa = a.qpn();
    n.connect(&mut a, &n, qa); // to itself
    Provider::req_notify_cq(&n.dev, &cq, false).unwrap();
    assert_eq!(Provider::get_cq_event(&n.dev, &mut ch).unwrap(), None);
    let sg = [n.sge(0, 8)];
    Provider::post_send(
        &n.dev,
        &mut a,
        &[SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: n.mem.addr() + 64,
                rkey: n.mr.rkey(),
            },
            ..wr(1, WrOpcode::RdmaWrite, &sg)
        }],
    )
    .unwrap();
    let mut ev = None;
    for _ in 0..1000 {
        ev = Provider::get_cq_event(&n.dev, &mut ch).unwrap();
        if ev.is_some() {
            break;
        }
        world.relax();
    }
    let ev = ev.expect("a completion event");
    assert_eq!((ev.cqn, ev.cq_context), (cq.cqn(), 0x77));
    assert_eq!(cq.arm_sn(), 1);
    let wc = poll_n(&world, &n.dev, &cq, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    // not re-armed: no second event
    Provider::post_send(
        &n.dev,
        &mut a,
        &[SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: n.mem.addr() + 64,
                rkey: n.mr.rkey(),
            },
            ..wr(2, WrOpcode::RdmaWrite, &sg)
        }],
    )
    .unwrap();
    poll_n(&world, &n.dev, &cq, 1);
    assert_eq!(Provider::get_cq_event(&n.dev, &mut ch).unwrap(), None);
    Provider::destroy_qp(&n.dev, a).unwrap();
    Provider::destroy_cq(&n.dev, cq).unwrap();
    Provider::destroy_comp_channel(&n.dev, ch).unwrap();
    no_device_errors(&n);
}

#[test]
fn teardown_releases_everything() {
    let (world, n) = loopback();
    let mut a = n.qp(QpType::Rc, true);
    let qa = a.qpn();
    n.connect(&mut a, &n, qa);
    let sg = [n.sge(0, 8)];
    Provider::post_send(
        &n.dev,
        &mut a,
        &[SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: n.mem.addr() + 64,
                rkey: n.mr.rkey(),
            },
            ..wr(1, WrOpcode::RdmaWrite, &sg)
        }],
    )
    .unwrap();
    poll_n(&world, &n.dev, &n.cq, 1);
    let Node {
        tb,
        dev,
        pd,
        cq,
        mem,
        mr,
        ..
    } = n;
    Provider::destroy_qp(&dev, a).unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::dereg_mr(&dev, mr).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
    drop(mem);
    dev.shutdown().unwrap();
    assert_eq!(tb.live(), nic_emulator::Live::default());
    assert_eq!(tb.dma.live_buffers(), 0);
}

/// The program's own static memory ([`verbs::StaticBytes`]) made device-reachable with
/// `map_buf` and registered: a SEND lands in it and an RDMA WRITE into it, both read back
/// through the buffer; a READ from it returns what is there; after deregistration and the last
/// handle the device's mapping is gone (the allocator's count is back), and no bytes is EINVAL.
#[test]
fn static_memory_registered_with_map_buf() {
    static MSGS: verbs::StaticBytes<8192> = verbs::StaticBytes::new();
    let (world, n) = loopback();
    let mem = Provider::map_buf(&n.dev, MSGS.take().unwrap()).unwrap();
    assert_eq!(mem.len(), 8192);
    // (counted as mappings, not buffers: the firmware's page requests move those meanwhile)
    let iova = mem.addr();
    assert!(n.tb.dma.regions().contains(&(iova, 8192)));
    assert!(n.tb.dma.translate(iova, 8192).is_some());
    let smr = n
        .dev
        .reg_mr(
            &n.pd,
            mem.clone(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let mut a = n.qp(QpType::Rc, true);
    let mut b = n.qp(QpType::Rc, true);
    let (qa, qb) = (a.qpn(), b.qpn());
    n.connect(&mut a, &n, qb);
    n.connect(&mut b, &n, qa);
    // a SEND from the device buffer into a receive in the static memory
    let msg: Vec<u8> = (0..100u8).map(|i| i ^ 0x5a).collect();
    n.write(0, &msg);
    let rsg = [Sge {
        addr: smr.addr() + 16,
        length: 100,
        lkey: smr.lkey(),
    }];
    Provider::post_recv(
        &n.dev,
        &mut b,
        &[RecvWr {
            wr_id: 7,
            sg_list: &rsg,
        }],
    )
    .unwrap();
    let ssg = [n.sge(0, 100)];
    Provider::post_send(&n.dev, &mut a, &[wr(1, WrOpcode::Send, &ssg)]).unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    let mut got = vec![0u8; 100];
    mem.read(16, &mut got).unwrap();
    assert_eq!(got, msg);
    // an RDMA WRITE into it, then a READ of it into the device buffer
    n.write(1024, &[0xc3; 64]);
    let wsg = [n.sge(1024, 64)];
    let dsg = [n.sge(2048, 64 + 100)];
    Provider::post_send(
        &n.dev,
        &mut a,
        &[
            SendWr {
                remote: RemoteOp::Rdma {
                    remote_addr: smr.addr() + 16 + 100,
                    rkey: smr.rkey(),
                },
                ..wr(2, WrOpcode::RdmaWrite, &wsg)
            },
            SendWr {
                remote: RemoteOp::Rdma {
                    remote_addr: smr.addr() + 16,
                    rkey: smr.rkey(),
                },
                ..wr(3, WrOpcode::RdmaRead, &dsg)
            },
        ],
    )
    .unwrap();
    let wc = poll_n(&world, &n.dev, &n.cq, 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    let mut want = msg.clone();
    want.extend_from_slice(&[0xc3; 64]);
    assert_eq!(n.read(2048, 164), want);
    // gone with the registration and the last handle
    Provider::destroy_qp(&n.dev, a).unwrap();
    Provider::destroy_qp(&n.dev, b).unwrap();
    Provider::dereg_mr(&n.dev, smr).unwrap();
    drop(mem);
    assert!(!n.tb.dma.regions().contains(&(iova, 8192)));
    assert!(n.tb.dma.translate(iova, 1).is_none());
    let empty: &'static mut [u8] = Box::leak(Vec::new().into_boxed_slice());
    assert_eq!(
        Provider::map_buf(&n.dev, empty).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    no_device_errors(&n);
}
