//! Data-path unit tests: the test plays the device. It reads the WQEs, doorbell records and
//! register writes the driver produced, and writes CQEs (and EQEs) into the rings by hand.

use std::vec::Vec;

use firmware_interface::cqe::{self, Cqe64, ErrCqe, opcode as cop, syndrome as syn};
use firmware_interface::wqe::{self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg};
use firmware_interface::{Be16, Be32, eqe};
use verbs::{
    AccessFlags, AhAttr, AsyncElement, AsyncEvent, AsyncEventType, Gid, PostError, QpAttr,
    QpAttrMask as M, QpCap, QpInitAttr, QpType, RecvWr, RemoteOp, SendFlags, SendWr, Sge, UdDest,
    WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use crate::ah::roce_udp_sport;
use crate::fake::*;
use crate::poll::wc_status;
use crate::qp::*;
use crate::*;

/// The CQ's ring, for the test to play the device.
pub(crate) fn cq_ring(cq: &Cq) -> &nic_hal::DmaBuf {
    // SAFETY: the tests poll and arm each CQ from the thread that plays its device, never
    // while they use this reference.
    unsafe { cq.buffer() }
}

/// The CQ's doorbell record (see [`cq_ring`]).
pub(crate) fn cq_rec(cq: &Cq) -> &nic_hal::DmaBuf {
    // SAFETY: as in `cq_ring`.
    unsafe { cq.doorbell_record() }
}

/// The SRQ's ring (see [`cq_ring`]).
pub(crate) fn srq_ring(srq: &Srq) -> &nic_hal::DmaBuf {
    // SAFETY: the tests post to each SRQ from the one thread that also reads its ring.
    unsafe { srq.buffer() }
}

/// The SRQ's doorbell record (see [`srq_ring`]).
pub(crate) fn srq_rec(srq: &Srq) -> &nic_hal::DmaBuf {
    // SAFETY: as in `srq_ring`.
    unsafe { srq.doorbell_record() }
}

// ------------------------------------------------------------------------------------------
// The rig

struct Rig {
    b: Bench,
    dev: Dev,
    cq: Cq,
    qp: Qp,
    /// Device-side CQ producer position.
    pi: u32,
}

fn rig_with(service: ServiceType, log_sq: u8, log_rq: u8, log_stride: u8, bf: bool) -> Rig {
    let b = bench();
    let dev = b.probe().unwrap();
    let cq = dev.create_cq(4, dev.driver_eqn().unwrap()).unwrap();
    let uar = if bf {
        Some(dev.alloc_uar().unwrap())
    } else {
        None
    };
    let mut qp = dev
        .create_qp(&QpCreate {
            service,
            pd: dev.driver_pd().unwrap(),
            send_cqn: cq.cqn(),
            recv_cqn: cq.cqn(),
            log_sq_size: log_sq,
            log_rq_size: log_rq,
            log_rq_stride: log_stride,
            uar,
            blueflame: bf,
        })
        .unwrap();
    dev.attach_qp(&mut qp, &cq, &cq).unwrap();
    let m = QpModify {
        qkey: 0x1234_5678,
        ..QpModify::default()
    };
    dev.modify_qp(&mut qp, Transition::Rst2Init, &m).unwrap();
    dev.modify_qp(&mut qp, Transition::Init2Rtr, &m).unwrap();
    dev.modify_qp(&mut qp, Transition::Rtr2Rts, &m).unwrap();
    b.fw().mmio.clear();
    Rig {
        b,
        dev,
        cq,
        qp,
        pi: 0,
    }
}

fn rig(log_sq: u8) -> Rig {
    rig_with(ServiceType::Rc, log_sq, 4, 2, false)
}

impl Rig {
    /// WQEBB `bb` (masked) of the SQ.
    fn bb(&self, bb: u32) -> [u8; 64] {
        let mut out = [0u8; 64];
        let off = self.qp.sq_offset() + (bb % self.qp.sq_wqebbs()) as usize * 64;
        self.qp.buffer().read(off, &mut out).unwrap();
        out
    }

    /// 16-byte unit `k` after the start of WQEBB `bb`, wrapping at the ring end.
    fn unit(&self, bb: u32, k: u32) -> [u8; 16] {
        let units = self.qp.sq_wqebbs() * 4;
        let u = (bb * 4 + k) % units;
        let b = self.bb(u / 4);
        let o = (u % 4) as usize * 16;
        b[o..o + 16].try_into().unwrap()
    }

    fn ctrl(&self, bb: u32) -> CtrlSeg {
        CtrlSeg::from_bytes(&self.unit(bb, 0))
    }

    fn data(&self, bb: u32, k: u32) -> DataSeg {
        DataSeg::from_bytes(&self.unit(bb, k))
    }

    fn post(&mut self, wrs: &[SendWr<'_, Ah>]) -> Result<(), (Error, usize)> {
        self.dev.post_send(&mut self.qp, wrs)
    }

    /// Writes a CQE at the device's producer position, owner bit of its pass.
    fn cqe(&mut self, mut c: Cqe64) {
        let log = self.cq.log_size();
        let idx = self.pi & ((1 << log) - 1);
        c.op_own = (c.op_own & 0xfe) | ((self.pi >> log) & 1) as u8;
        cq_ring(&self.cq)
            .write(idx as usize * 64, &c.to_bytes())
            .unwrap();
        self.pi += 1;
    }

    fn poll(&self, n: usize) -> Result<Vec<WorkCompletion>, Error> {
        let mut wc = vec![WorkCompletion::default(); n];
        let k = self.cq.poll(&mut wc)?;
        wc.truncate(k);
        Ok(wc)
    }

    fn sq_dbrec(&self) -> u32 {
        self.qp.doorbell_record().read_be32(4).unwrap()
    }

    fn rq_dbrec(&self) -> u32 {
        self.qp.doorbell_record().read_be32(0).unwrap()
    }

    fn mmio(&self) -> Vec<(usize, Vec<u8>)> {
        self.b.fw().mmio.clone()
    }
}

/// A requester CQE: success (`REQ`, carrying `op`) for `counter`.
fn req(qpn: u32, counter: u16, op: u8) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: Be32::new(((op as u32) << 24) | qpn),
        wqe_counter: Be16::new(counter),
        op_own: cop::REQ << 4,
        ..Cqe64::zeroed()
    }
}

/// An error CQE (requester or responder) with `syndrome` / `vendor`.
fn err(opcode: u8, qpn: u32, counter: u16, syndrome: u8, vendor: u8) -> Cqe64 {
    let e = ErrCqe {
        syndrome,
        vendor_err_synd: vendor,
        s_wqe_opcode_qpn: Be32::new(qpn),
        wqe_counter: Be16::new(counter),
        op_own: opcode << 4,
        ..ErrCqe::default()
    };
    Cqe64::from_bytes(&e.to_bytes())
}

/// A responder CQE.
fn resp(opcode: u8, qpn: u32, counter: u16, byte_cnt: u32) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: Be32::new(qpn),
        wqe_counter: Be16::new(counter),
        byte_cnt: Be32::new(byte_cnt),
        op_own: opcode << 4,
        ..Cqe64::zeroed()
    }
}

fn send(wr_id: u64, sg: &[Sge]) -> SendWr<'_, Ah> {
    SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        sg_list: sg,
        ..SendWr::default()
    }
}

fn signaled(wr_id: u64, sg: &[Sge]) -> SendWr<'_, Ah> {
    SendWr {
        flags: SendFlags::SIGNALED,
        ..send(wr_id, sg)
    }
}

const SG: [Sge; 1] = [Sge {
    addr: 0x10_0000,
    length: 64,
    lkey: 0x77,
}];

fn bad(e: Error) -> CqeFault {
    match e {
        Error::BadCqe { fault, .. } => fault,
        other => panic!("not a bad CQE: {other:?}"),
    }
}

// ------------------------------------------------------------------------------------------
// WQE layouts

#[test]
fn send_wqe_field_by_field() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let sg = [
        Sge {
            addr: 0x1000,
            length: 100,
            lkey: 0x55,
        },
        Sge {
            addr: 0x2000,
            length: 0,
            lkey: 1,
        },
        Sge {
            addr: 0x3000_0000_0000,
            length: 7,
            lkey: 0x66,
        },
    ];
    let wr = SendWr {
        flags: SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE,
        ..send(42, &sg)
    };
    r.post(&[wr]).unwrap();
    let c = r.ctrl(0);
    assert_eq!(c.opmod_idx_opcode.get(), wqe::opcode::SEND as u32);
    // ctrl + two data segments: the zero-length SGE is skipped
    assert_eq!(c.qpn_ds.get(), (qpn << 8) | 3);
    assert_eq!(c.signature, 0);
    assert_eq!(c.rsvd, [0, 0]);
    assert_eq!(
        c.fm_ce_se,
        wqe::FENCE_SMALL_AND | wqe::CE_CQ_UPDATE | wqe::SOLICITED
    );
    assert_eq!(c.imm.get(), 0);
    assert_eq!(
        r.data(0, 1),
        DataSeg {
            byte_count: Be32::new(100),
            lkey: Be32::new(0x55),
            addr: 0x1000u64.to_be_bytes().into_be64(),
        }
    );
    let d2 = r.data(0, 2);
    assert_eq!(
        (d2.byte_count.get(), d2.lkey.get(), d2.addr.get()),
        (7, 0x66, 0x3000_0000_0000)
    );
    assert_eq!(r.qp.sq_producer(), 1);
    assert_eq!(r.sq_dbrec(), 1);

    // unsignalled, no flags: CE = 0 (CQE only on error); the index advances
    r.post(&[send(43, &SG)]).unwrap();
    let c = r.ctrl(1);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (1 << 8) | wqe::opcode::SEND as u32
    );
    assert_eq!(c.fm_ce_se, 0);
    assert_eq!(c.qpn_ds.get() & 0x3f, 2);
}

/// `Be64` from its big-endian bytes (test shorthand).
trait IntoBe64 {
    fn into_be64(self) -> firmware_interface::Be64;
}
impl IntoBe64 for [u8; 8] {
    fn into_be64(self) -> firmware_interface::Be64 {
        firmware_interface::Be64(self)
    }
}

#[test]
fn imm_rdma_and_read_wqes() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let imm = 0xdead_beefu32.to_be();
    let wrs = [
        SendWr {
            opcode: WrOpcode::SendWithImm,
            imm_data: imm,
            ..send(1, &SG)
        },
        SendWr {
            opcode: WrOpcode::RdmaWriteWithImm,
            imm_data: imm,
            remote: RemoteOp::Rdma {
                remote_addr: 0xaaaa_0000_1111,
                rkey: 0x4242,
            },
            ..send(2, &SG)
        },
        SendWr {
            opcode: WrOpcode::RdmaRead,
            flags: SendFlags::SIGNALED,
            remote: RemoteOp::Rdma {
                remote_addr: 0x5000,
                rkey: 0x99,
            },
            ..send(3, &SG)
        },
        SendWr {
            opcode: WrOpcode::RdmaWrite,
            imm_data: imm, // ignored: no immediate
            remote: RemoteOp::Rdma {
                remote_addr: 0x6000,
                rkey: 0x98,
            },
            ..send(4, &SG)
        },
    ];
    r.post(&wrs).unwrap();
    let c = r.ctrl(0);
    assert_eq!(c.opmod_idx_opcode.get(), wqe::opcode::SEND_IMM as u32);
    assert_eq!(c.qpn_ds.get(), (qpn << 8) | 2);
    // immediate data copied as given (network order)
    assert_eq!(c.imm.0, [0xde, 0xad, 0xbe, 0xef]);

    let c = r.ctrl(1);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (1 << 8) | wqe::opcode::RDMA_WRITE_IMM as u32
    );
    assert_eq!(c.qpn_ds.get() & 0x3f, 3);
    assert_eq!(c.imm.0, [0xde, 0xad, 0xbe, 0xef]);
    let ra = RaddrSeg::from_bytes(&r.unit(1, 1));
    assert_eq!(
        (ra.raddr.get(), ra.rkey.get(), ra.rsvd.get()),
        (0xaaaa_0000_1111, 0x4242, 0)
    );
    assert_eq!(r.data(1, 2).addr.get(), 0x10_0000);

    let c = r.ctrl(2);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (2 << 8) | wqe::opcode::RDMA_READ as u32
    );
    assert_eq!(c.fm_ce_se, wqe::CE_CQ_UPDATE);
    assert_eq!(RaddrSeg::from_bytes(&r.unit(2, 1)).rkey.get(), 0x99);

    let c = r.ctrl(3);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (3 << 8) | wqe::opcode::RDMA_WRITE as u32
    );
    assert_eq!(c.imm.get(), 0);
    assert_eq!(r.sq_dbrec(), 4);
}

#[test]
fn send_with_invalidate_wqe_carries_the_rkey() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let wrs = [
        SendWr {
            opcode: WrOpcode::SendWithInv,
            imm_data: 0x0012_3456, // the rkey, host order
            ..send(1, &SG)
        },
        SendWr {
            opcode: WrOpcode::SendWithInv,
            flags: SendFlags::INLINE | SendFlags::SIGNALED,
            inline_data: b"resp",
            imm_data: 0xabcd_ef01,
            ..SendWr::default()
        },
    ];
    r.post(&wrs).unwrap();
    let c = r.ctrl(0);
    assert_eq!(c.opmod_idx_opcode.get(), wqe::opcode::SEND_INVAL as u32);
    assert_eq!(c.qpn_ds.get(), (qpn << 8) | 2);
    // the rkey to invalidate, big-endian in the immediate field
    assert_eq!(c.imm.0, [0x00, 0x12, 0x34, 0x56]);
    assert_eq!(r.data(0, 1).addr.get(), 0x10_0000);
    let c = r.ctrl(1);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (1 << 8) | wqe::opcode::SEND_INVAL as u32
    );
    assert_eq!(c.imm.get(), 0xabcd_ef01);
    assert_eq!(c.fm_ce_se, wqe::CE_CQ_UPDATE);
    assert_eq!(r.sq_dbrec(), 2);
    // a datagram QP has no SEND with invalidate
    let mut u = rig_with(ServiceType::Ud, 4, 4, 2, false);
    let wr = SendWr {
        opcode: WrOpcode::SendWithInv,
        imm_data: 1,
        ..send(1, &SG)
    };
    assert_eq!(u.post(&[wr]), Err((Error::InvalidArgument, 0)));
    assert_eq!(u.sq_dbrec(), 0);
}

#[test]
fn atomic_wqes() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let res = [Sge {
        addr: 0x8000,
        length: 8,
        lkey: 0x31,
    }];
    let cas = SendWr {
        opcode: WrOpcode::AtomicCmpAndSwp,
        remote: RemoteOp::Atomic {
            remote_addr: 0x1_0000,
            rkey: 0x77,
            compare_add: 5,
            swap: 9,
        },
        ..signaled(1, &res)
    };
    let faa = SendWr {
        opcode: WrOpcode::AtomicFetchAndAdd,
        remote: RemoteOp::Atomic {
            remote_addr: 0x1_0008,
            rkey: 0x77,
            compare_add: 3,
            swap: 1234, // ignored
        },
        ..signaled(2, &res)
    };
    r.post(&[cas, faa]).unwrap();
    for (bb, op, swap_add, compare) in [
        (0, wqe::opcode::ATOMIC_CS, 9, 5),
        (1, wqe::opcode::ATOMIC_FA, 3, 0),
    ] {
        let c = r.ctrl(bb);
        assert_eq!(c.opmod_idx_opcode.get(), (bb << 8) | op as u32);
        assert_eq!(c.qpn_ds.get(), (qpn << 8) | 4);
        let ra = RaddrSeg::from_bytes(&r.unit(bb, 1));
        assert_eq!(ra.rkey.get(), 0x77);
        let a = AtomicSeg::from_bytes(&r.unit(bb, 2));
        assert_eq!((a.swap_add.get(), a.compare.get()), (swap_add, compare));
        let d = r.data(bb, 3);
        assert_eq!(
            (d.byte_count.get(), d.lkey.get(), d.addr.get()),
            (8, 0x31, 0x8000)
        );
    }
    // an atomic needs exactly one 8-byte SGE
    let two = [res[0], res[0]];
    let short = [Sge {
        length: 4,
        ..res[0]
    }];
    for sg in [&two[..], &short[..], &[][..]] {
        assert_eq!(
            r.post(&[SendWr { sg_list: sg, ..cas }]),
            Err((Error::InvalidArgument, 0))
        );
    }
    // the remote part must match the opcode
    assert_eq!(
        r.post(&[SendWr {
            remote: RemoteOp::None,
            ..cas
        }]),
        Err((Error::InvalidArgument, 0))
    );
    assert_eq!(r.qp.sq_producer(), 2);
}

#[test]
fn inline_data_wraps_at_the_ring_end() {
    let mut r = rig(3); // 8 WQEBBs
    let qpn = r.qp.qpn();
    assert_eq!(r.qp.max_inline_data(), 8 * 64 - 32 - 4);
    // Fill 7 WQEBBs, the last signalled; complete them with one CQE (selective signalling).
    let wrs: Vec<_> = (0..7)
        .map(|i| {
            if i == 6 {
                signaled(i, &SG)
            } else {
                send(i, &SG)
            }
        })
        .collect();
    r.post(&wrs).unwrap();
    r.cqe(req(qpn, 6, wqe::opcode::SEND));
    let wc = r.poll(4).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 6);
    assert_eq!(r.qp.sq_consumer(), 7);

    let data: Vec<u8> = (0..100u8).collect();
    let wr = SendWr {
        flags: SendFlags::INLINE | SendFlags::SIGNALED,
        inline_data: &data,
        ..send(99, &[])
    };
    r.post(&[wr]).unwrap();
    let c = r.ctrl(7);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (7 << 8) | wqe::opcode::SEND as u32
    );
    // ctrl + ceil((4 + 100) / 16) = 1 + 7 units = 2 WQEBBs
    assert_eq!(c.qpn_ds.get(), (qpn << 8) | 8);
    let last = r.bb(7);
    assert_eq!(&last[16..20], &(100u32 | wqe::INLINE_SEG).to_be_bytes());
    assert_eq!(&last[20..64], &data[..44]);
    let first = r.bb(0);
    assert_eq!(&first[..56], &data[44..]);
    assert_eq!(r.qp.sq_producer(), 9);
    assert_eq!(r.sq_dbrec(), 9);

    // too much inline, inline with an SGE list, or inline on a read: refused
    let big = vec![0u8; r.qp.max_inline_data() as usize + 1];
    for wr in [
        SendWr {
            inline_data: &big,
            ..wr
        },
        SendWr { sg_list: &SG, ..wr },
        SendWr {
            opcode: WrOpcode::RdmaRead,
            remote: RemoteOp::Rdma {
                remote_addr: 0,
                rkey: 0,
            },
            ..wr
        },
        SendWr {
            flags: SendFlags::SIGNALED,
            ..wr
        },
    ] {
        assert_eq!(r.post(&[wr]), Err((Error::InvalidArgument, 0)));
    }
}

#[test]
fn too_many_sges_is_einval() {
    let mut r = rig(2); // 4 WQEBBs = 256 bytes: (256 - 32) / 16 = 14 SGEs
    assert_eq!(r.qp.max_send_sge(), 14);
    let sg = vec![SG[0]; 15];
    assert_eq!(
        r.post(&[send(0, &SG), send(1, &sg)]),
        Err((Error::InvalidArgument, 1))
    );
    // the first one was posted and rung
    assert_eq!(r.qp.sq_producer(), 1);
    assert_eq!(r.sq_dbrec(), 1);
    assert_eq!(r.mmio().len(), 1);
}

#[test]
fn ud_datagram_segment_from_the_ah() {
    let mut r = rig_with(ServiceType::Ud, 3, 4, 2, false);
    let qpn = r.qp.qpn();
    assert_eq!(r.qp.qkey(), 0x1234_5678);
    // As Linux's mlx5_ib: a UD QP reaches RTR with a 4096-byte MTU and 2^12-byte messages.
    let rtr = r.b.fw().inputs[&firmware_interface::opcode::INIT2RTR_QP].clone();
    let qb = firmware_interface::cmds::init2rtr_qp_in::QPC.byte_off();
    use firmware_interface::ctx::qpc;
    assert_eq!(
        (qpc::MTU.at(qb).get(&rtr), qpc::LOG_MSG_MAX.at(qb).get(&rtr)),
        (qpc::MTU_4096, 12)
    );
    let attr = AhAttr {
        dgid: Gid::from_ipv4([10, 1, 2, 3]),
        flow_label: 0x1_2345,
        sgid_index: 3,
        hop_limit: 17,
        traffic_class: 0x48,
        sl: 5,
        is_global: true,
        port_num: 1,
        dmac: [2, 0, 0, 0, 0, 9],
        ..AhAttr::default()
    };
    let ah = r.dev.create_ah(r.dev.driver_pd().unwrap(), &attr).unwrap();
    let wr = SendWr {
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 0x12_3456,
            remote_qkey: 0x1111,
        }),
        ..signaled(1, &SG)
    };
    // Six WQEs so that the next one (2 WQEBBs) starts at the last WQEBB and wraps.
    let wrs = [wr; 3];
    r.post(&wrs).unwrap(); // 2 WQEBBs each: positions 0, 2, 4
    r.cqe(req(qpn, 4, wqe::opcode::SEND));
    assert_eq!(r.poll(1).unwrap()[0].wr_id, 1);
    assert_eq!(r.qp.sq_consumer(), 6);
    let one = SendWr {
        flags: SendFlags::INLINE,
        inline_data: &[1, 2, 3],
        sg_list: &[],
        ..wr
    };
    r.post(&[one]).unwrap(); // position 6: 1 WQEBB (ctrl + AV + 1 inline unit... = 5 units)
    assert_eq!(r.qp.sq_producer(), 8);
    let controlled = SendWr {
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 7,
            remote_qkey: 0x8000_0000,
        }),
        ..wr
    };
    // room: 8 WQEBBs, 2 outstanding (6, 7)
    r.post(&[controlled]).unwrap(); // position 8 = WQEBB 0
    let c = r.ctrl(0);
    assert_eq!(
        c.opmod_idx_opcode.get(),
        (8 << 8) | wqe::opcode::SEND as u32
    );
    assert_eq!(c.qpn_ds.get(), (qpn << 8) | 5);
    let mut av = [0u8; 48];
    for k in 0..3 {
        av[k * 16..k * 16 + 16].copy_from_slice(&r.unit(0, 1 + k as u32));
    }
    let d = DatagramSeg::from_bytes(&av);
    // controlled Q_Key: bit 31 asks for the QP's
    assert_eq!(d.qkey.get(), 0x1234_5678);
    assert_eq!(d.dqp_dct.get(), wqe::EXTENDED_UD_AV | 7);

    // the first WQE, field by field
    let mut av = [0u8; 48];
    for k in 0..3 {
        av[k * 16..k * 16 + 16].copy_from_slice(&r.unit(2, 1 + k as u32));
    }
    let d = DatagramSeg::from_bytes(&av);
    assert_eq!(d.qkey.get(), 0x1111);
    assert_eq!(d.rsvd0.get(), 0);
    assert_eq!(d.dqp_dct.get(), 0x8012_3456);
    assert_eq!(d.stat_rate_sl, 5 << 1);
    assert_eq!(d.fl_mlid, 0);
    assert_eq!(d.rlid.get(), roce_udp_sport(0x1_2345));
    assert!(d.rlid.get() >= 0xc000);
    assert_eq!(d.rmac, [2, 0, 0, 0, 0, 9]);
    assert_eq!(d.tclass, 0x48);
    assert_eq!(d.hop_limit, 17);
    assert_eq!(d.grh_gid_fl.get(), (3 << 20) | 0x1_2345);
    assert_eq!(d.rgid, Gid::from_ipv4([10, 1, 2, 3]).0);
    let data = r.data(2, 4);
    assert_eq!((data.byte_count.get(), data.lkey.get()), (64, 0x77));
    assert_eq!(ah.datagram().rgid, d.rgid);

    // RC operations, remote memory and a missing destination are refused on UD
    for w in [
        SendWr { dest: None, ..wr },
        SendWr {
            remote: RemoteOp::Rdma {
                remote_addr: 0,
                rkey: 0,
            },
            ..wr
        },
        SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote: RemoteOp::Rdma {
                remote_addr: 0,
                rkey: 0,
            },
            ..wr
        },
        SendWr {
            dest: Some(UdDest {
                ah: &ah,
                remote_qpn: 1 << 24,
                remote_qkey: 0,
            }),
            ..wr
        },
    ] {
        assert_eq!(r.post(&[w]), Err((Error::InvalidArgument, 0)));
    }
    // AH validation (RoCE)
    let pd = r.dev.driver_pd().unwrap();
    for a in [
        AhAttr {
            is_global: false,
            ..attr
        },
        AhAttr {
            dmac: [0; 6],
            ..attr
        },
        AhAttr {
            port_num: 2,
            ..attr
        },
        AhAttr {
            sgid_index: 16,
            ..attr
        },
        AhAttr {
            flow_label: 1 << 20,
            ..attr
        },
    ] {
        assert_eq!(r.dev.create_ah(pd, &a), Err(Error::InvalidArgument));
    }
}

#[test]
fn ud_wqe_with_av_wrapping_the_ring() {
    let mut r = rig_with(ServiceType::Ud, 2, 4, 2, false); // 4 WQEBBs
    let qpn = r.qp.qpn();
    let attr = AhAttr {
        dgid: Gid::from_ipv4([10, 0, 0, 2]),
        is_global: true,
        port_num: 1,
        dmac: [2, 0, 0, 0, 0, 2],
        hop_limit: 64,
        ..AhAttr::default()
    };
    let ah = r.dev.create_ah(0, &attr).unwrap();
    let sg3 = [SG[0]; 3];
    let wr = SendWr {
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 0x42,
            remote_qkey: 0x1,
        }),
        ..signaled(5, &sg3)
    };
    // 1 WQEBB filler, then a 2-WQEBB one at 1, a filler at 3 ... use a 1-WQEBB WQE at 0..2
    let small = SendWr { sg_list: &[], ..wr };
    r.post(&[small, small, small]).unwrap();
    r.cqe(req(qpn, 2, wqe::opcode::SEND));
    r.poll(1).unwrap();
    // position 3 = last WQEBB: ctrl + AV (3 units) there, the 3 data segments in WQEBB 0
    r.post(&[wr]).unwrap();
    assert_eq!(r.ctrl(3).qpn_ds.get(), (qpn << 8) | 7);
    assert_eq!(
        DatagramSeg::from_bytes(
            &[r.unit(3, 1), r.unit(3, 2), r.unit(3, 3)]
                .concat()
                .try_into()
                .unwrap()
        )
        .dqp_dct
        .get(),
        0x8000_0042
    );
    for k in 0..3 {
        assert_eq!(r.data(0, k).byte_count.get(), 64);
    }
    assert_eq!(r.qp.sq_producer(), 5);
}

// ------------------------------------------------------------------------------------------
// Doorbells

#[test]
fn doorbell_record_then_one_8_byte_uar_write_per_batch() {
    let mut r = rig(4);
    let uar = r.qp.uar() as usize;
    let half = 1usize << (r.dev.caps().log_bf_reg_size - 1);
    r.post(&[send(1, &SG), send(2, &SG), send(3, &SG)]).unwrap();
    assert_eq!(r.sq_dbrec(), 3);
    let w = r.mmio();
    assert_eq!(w.len(), 1, "one doorbell for the batch");
    assert_eq!(w[0].0, uar * 4096 + 0x800);
    // the last WQE's first 8 control bytes, as in memory
    assert_eq!(w[0].1, r.bb(2)[..8].to_vec());
    r.post(&[send(4, &SG)]).unwrap();
    let w = r.mmio();
    assert_eq!(w[1].0, uar * 4096 + 0x800 + half, "the halves alternate");
    assert_eq!(w[1].1, r.bb(3)[..8].to_vec());
    r.post(&[send(5, &SG)]).unwrap();
    assert_eq!(r.mmio()[2].0, uar * 4096 + 0x800);
    assert_eq!(r.sq_dbrec(), 5);
    assert!(!r.qp.blueflame());
}

#[test]
fn blueflame_copies_a_single_small_wqe() {
    let mut r = rig_with(ServiceType::Rc, 4, 4, 2, true);
    assert!(r.qp.blueflame());
    let uar = r.qp.uar() as usize;
    assert_ne!(uar as u32, r.dev.driver_uar().unwrap());
    let half = 1usize << (r.dev.caps().log_bf_reg_size - 1);
    r.post(&[send(1, &SG)]).unwrap();
    let w = r.mmio();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0], (uar * 4096 + 0x800, r.bb(0).to_vec()));
    // a 2-WQEBB WQE: both blocks as 64-byte stores, to the other half
    let sg = [SG[0]; 5];
    r.post(&[send(2, &sg)]).unwrap();
    let w = r.mmio();
    assert_eq!(w[1], (uar * 4096 + 0x800 + half, r.bb(1).to_vec()));
    assert_eq!(w[2], (uar * 4096 + 0x800 + half + 64, r.bb(2).to_vec()));
    // several WQEs: a plain doorbell
    r.post(&[send(3, &SG), send(4, &SG)]).unwrap();
    let w = r.mmio();
    assert_eq!(w[3], (uar * 4096 + 0x800, r.bb(4)[..8].to_vec()));
    // a WQE larger than the half (256 bytes): plain doorbell
    let sg = [SG[0]; 20];
    r.post(&[send(5, &sg)]).unwrap();
    assert_eq!(r.mmio()[4].1.len(), 8);
}

#[test]
fn blueflame_wqe_wrapping_the_ring_is_copied_in_order() {
    let mut r = rig_with(ServiceType::Rc, 2, 4, 2, true); // 4 WQEBBs
    let qpn = r.qp.qpn();
    r.post(&[send(0, &SG), send(1, &SG), signaled(2, &SG)])
        .unwrap();
    r.cqe(req(qpn, 2, wqe::opcode::SEND));
    r.poll(1).unwrap();
    let sg = [SG[0]; 5]; // 6 units = 2 WQEBBs: 3 and 0
    r.post(&[send(3, &sg)]).unwrap();
    let w = r.mmio();
    let n = w.len();
    assert_eq!(
        (w[n - 2].1.clone(), w[n - 1].1.clone()),
        (r.bb(3).to_vec(), r.bb(0).to_vec())
    );
    assert_eq!(w[n - 1].0, w[n - 2].0 + 64);
}

#[test]
fn full_sq_is_enomem_with_the_index() {
    let mut r = rig(3); // 8 WQEBBs
    let wrs: Vec<_> = (0..10).map(|i| send(i, &SG)).collect();
    assert_eq!(r.post(&wrs), Err((Error::QueueFull, 8)));
    assert_eq!(Error::QueueFull.errno(), 12);
    assert_eq!(r.qp.sq_producer(), 8);
    assert_eq!(r.sq_dbrec(), 8);
    assert_eq!(r.mmio().len(), 1, "the 8 posted were rung");
    // still full
    assert_eq!(r.post(&wrs[..1]), Err((Error::QueueFull, 0)));
    assert_eq!(r.mmio().len(), 1);
    // through the verbs provider: ENOMEM and the bad index
    use verbs::Provider;
    assert_eq!(
        Provider::post_send(&r.dev, &mut r.qp, &wrs[..2]),
        Err(PostError {
            error: verbs::Error::NoMemory,
            bad_wr: 0
        })
    );
    // an error CQE naming the 4th WQE retires 4 (0..=3)
    let qpn = r.qp.qpn();
    r.cqe(err(cop::REQ_ERR, qpn, 3, syn::WR_FLUSH_ERR, 0));
    let wc = r.poll(4).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::WrFlushErr));
    assert_eq!(r.post(&wrs[..6]), Err((Error::QueueFull, 4)));
}

#[test]
fn posting_needs_a_ready_qp() {
    let b = bench();
    let dev = b.probe().unwrap();
    let cq = dev.create_cq(4, dev.driver_eqn().unwrap()).unwrap();
    let mut qp = dev
        .create_qp(&QpCreate {
            send_cqn: cq.cqn(),
            recv_cqn: cq.cqn(),
            ..QpCreate::default()
        })
        .unwrap();
    assert_eq!(
        dev.post_send(&mut qp, &[send(0, &SG)]),
        Err((Error::InvalidArgument, 0))
    );
    assert_eq!(
        dev.post_recv(&mut qp, &[RecvWr::default()]),
        Err((Error::InvalidArgument, 0))
    );
    // empty lists are fine anywhere
    assert_eq!(dev.post_send(&mut qp, &[]), Ok(()));
    dev.modify_qp(&mut qp, Transition::Rst2Init, &QpModify::default())
        .unwrap();
    assert_eq!(dev.post_recv(&mut qp, &[RecvWr::default()]), Ok(()));
    assert_eq!(
        dev.post_send(&mut qp, &[send(0, &SG)]),
        Err((Error::InvalidArgument, 0))
    );
}

#[test]
fn receive_wqes_terminator_and_doorbell_record() {
    let mut r = rig_with(ServiceType::Rc, 4, 2, 2, false); // 4 RQ WQEs of 64 bytes (4 units)
    let sg = [
        Sge {
            addr: 0x9000,
            length: 256,
            lkey: 0x5,
        },
        Sge {
            addr: 0xa000,
            length: 0,
            lkey: 0x5,
        },
        Sge {
            addr: 0xb000,
            length: 128,
            lkey: 0x6,
        },
    ];
    let full = [SG[0]; 4];
    let wrs = [
        RecvWr {
            wr_id: 1,
            sg_list: &sg,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &full,
        },
    ];
    r.dev.post_recv(&mut r.qp, &wrs).unwrap();
    assert_eq!(r.rq_dbrec(), 2);
    assert_eq!(r.qp.rq_producer(), 2);
    let rd = |k: usize| {
        let mut b = [0u8; 16];
        r.qp.buffer().read(k * 16, &mut b).unwrap();
        DataSeg::from_bytes(&b)
    };
    assert_eq!(
        (rd(0).byte_count.get(), rd(0).lkey.get(), rd(0).addr.get()),
        (256, 5, 0x9000)
    );
    assert_eq!((rd(1).byte_count.get(), rd(1).addr.get()), (128, 0xb000));
    assert_eq!(
        (rd(2).byte_count.get(), rd(2).lkey.get(), rd(2).addr.get()),
        (0, wqe::INVALID_LKEY, 0)
    );
    // a full WQE has no terminator: all four units are data
    for k in 4..8 {
        assert_eq!(rd(k).lkey.get(), 0x77);
    }
    // no MMIO for receives
    assert!(r.mmio().is_empty());
    // five SGEs do not fit a 4-unit WQE
    let five = [SG[0]; 5];
    assert_eq!(
        r.dev.post_recv(
            &mut r.qp,
            &[RecvWr {
                wr_id: 3,
                sg_list: &five
            }]
        ),
        Err((Error::InvalidArgument, 0))
    );
    // two more fit, the third is ENOMEM
    let one = RecvWr {
        wr_id: 9,
        sg_list: &SG,
    };
    assert_eq!(
        r.dev.post_recv(&mut r.qp, &[one, one, one]),
        Err((Error::QueueFull, 2))
    );
    assert_eq!(r.rq_dbrec(), 4);
}

// ------------------------------------------------------------------------------------------
// Polling

#[test]
fn owner_bit_over_several_passes_and_the_consumer_index_record() {
    let mut r = rig(5); // 32 WQEBBs; the CQ has 16 entries
    let qpn = r.qp.qpn();
    let mut next_wr = 0u64;
    let mut expect = 0u64;
    for pass in 0..3 {
        // 16 signalled sends, their CQEs written by the "device", polled in uneven batches
        let wrs: Vec<_> = (0..16).map(|i| signaled(next_wr + i, &SG)).collect();
        r.post(&wrs).unwrap();
        for i in 0..16 {
            let counter = (next_wr + i) as u16;
            r.cqe(req(qpn, counter, wqe::opcode::SEND));
        }
        next_wr += 16;
        let mut got = 0;
        for batch in [5, 1, 7, 16] {
            let wc = r.poll(batch).unwrap();
            for w in &wc {
                assert_eq!(w.wr_id, expect, "pass {pass}");
                assert_eq!(w.status, WcStatus::Success);
                assert_eq!(w.opcode, WcOpcode::Send);
                assert_eq!(w.qp_num, qpn);
                expect += 1;
            }
            got += wc.len();
            // the record follows every batch
            let ci = cq_rec(&r.cq).read_be32(0).unwrap();
            assert_eq!(ci, r.cq.consumer_index() & 0xff_ffff);
        }
        assert_eq!(got, 16);
        // nothing more: the next entries still carry the previous pass's owner bit
        assert!(r.poll(4).unwrap().is_empty());
        assert_eq!(r.cq.consumer_index(), 16 * (pass + 1));
    }
    assert_eq!(r.qp.sq_consumer(), 48);
}

#[test]
fn an_entry_of_the_wrong_pass_is_not_consumed() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    r.post(&[signaled(1, &SG)]).unwrap();
    // written with the owner bit of pass 1 while the consumer is in pass 0
    r.pi = 16;
    r.cqe(req(qpn, 0, wqe::opcode::SEND));
    assert!(r.poll(4).unwrap().is_empty());
    assert_eq!(r.cq.consumer_index(), 0);
    // no consumer-index update when nothing was polled
    assert_eq!(cq_rec(&r.cq).read_be32(0).unwrap(), 0);
}

#[test]
fn selective_signalling_retires_every_earlier_wqe() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let sg4 = [SG[0]; 4]; // 5 units: 2 WQEBBs
    let wrs = [
        send(0, &SG),
        send(1, &sg4),
        send(2, &SG),
        signaled(3, &sg4),
        send(4, &SG),
    ];
    r.post(&wrs).unwrap();
    assert_eq!(r.qp.sq_producer(), 7);
    r.cqe(req(qpn, 4, wqe::opcode::SEND));
    let wc = r.poll(8).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 3);
    // the signalled WQE spans 4..5: everything before 6 is free again
    assert_eq!(r.qp.sq_consumer(), 6);
    // a CQE naming the retired ones, or the middle of a WQE, is refused
    r.cqe(req(qpn, 3, wqe::opcode::SEND));
    assert_eq!(
        bad(r.poll(1).unwrap_err()),
        CqeFault::WqeCounter {
            qpn,
            wqe_counter: 3
        }
    );
    r.post(&[signaled(5, &sg4)]).unwrap(); // 7..8
    r.cqe(req(qpn, 8, wqe::opcode::SEND));
    assert_eq!(
        bad(r.poll(1).unwrap_err()),
        CqeFault::WqeCounter {
            qpn,
            wqe_counter: 8
        }
    );
    // an unsignalled WQE cannot complete successfully...
    r.cqe(req(qpn, 6, wqe::opcode::SEND));
    assert_eq!(
        bad(r.poll(1).unwrap_err()),
        CqeFault::Unsignaled {
            qpn,
            wqe_counter: 6
        }
    );
    // ... but may complete with an error (a flush)
    r.cqe(err(cop::REQ_ERR, qpn, 6, syn::WR_FLUSH_ERR, 0));
    let wc = r.poll(1).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status), (4, WcStatus::WrFlushErr));
    r.cqe(req(qpn, 7, wqe::opcode::SEND));
    assert_eq!(r.poll(1).unwrap()[0].wr_id, 5);
    assert_eq!(r.qp.sq_consumer(), 9);
    assert_eq!(r.cq.bad_cqes().0, 3);
}

#[test]
fn error_cqes_map_to_wc_status() {
    let table = [
        (syn::LOCAL_LENGTH_ERR, WcStatus::LocLenErr),
        (syn::LOCAL_QP_OP_ERR, WcStatus::LocQpOpErr),
        (syn::LOCAL_PROT_ERR, WcStatus::LocProtErr),
        (syn::WR_FLUSH_ERR, WcStatus::WrFlushErr),
        (syn::MW_BIND_ERR, WcStatus::MwBindErr),
        (syn::BAD_RESP_ERR, WcStatus::BadRespErr),
        (syn::LOCAL_ACCESS_ERR, WcStatus::LocAccessErr),
        (syn::REMOTE_INVAL_REQ_ERR, WcStatus::RemInvReqErr),
        (syn::REMOTE_ACCESS_ERR, WcStatus::RemAccessErr),
        (syn::REMOTE_OP_ERR, WcStatus::RemOpErr),
        (syn::TRANSPORT_RETRY_EXC_ERR, WcStatus::RetryExcErr),
        (syn::RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExcErr),
        (syn::REMOTE_ABORTED_ERR, WcStatus::RemAbortErr),
        (syn::VENDOR_ODP_PAGE_FAULT, WcStatus::GeneralErr),
        (0x77, WcStatus::GeneralErr),
    ];
    let mut r = rig(5);
    let qpn = r.qp.qpn();
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        remote: RemoteOp::Rdma {
            remote_addr: 1,
            rkey: 2,
        },
        ..send(0, &SG)
    };
    for (i, (s, status)) in table.iter().enumerate() {
        r.post(&[SendWr {
            wr_id: 100 + i as u64,
            ..read
        }])
        .unwrap();
        r.cqe(err(cop::REQ_ERR, qpn, i as u16, *s, 0x40 + i as u8));
        let wc = r.poll(2).unwrap();
        assert_eq!(wc.len(), 1);
        assert_eq!(wc[0].status, *status, "syndrome {s:#x}");
        assert_eq!(wc[0].vendor_err, 0x40 + i as u32);
        assert_eq!(wc[0].wr_id, 100 + i as u64);
        assert_eq!(wc[0].opcode, WcOpcode::RdmaRead);
        // (`byte_len` is undefined for an error completion.)
    }
    // responder errors complete receive WQEs
    r.dev
        .post_recv(
            &mut r.qp,
            &[RecvWr {
                wr_id: 7,
                sg_list: &SG,
            }],
        )
        .unwrap();
    r.cqe(err(cop::RESP_ERR, qpn, 0, syn::LOCAL_PROT_ERR, 0x12));
    let wc = r.poll(1).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].vendor_err),
        (7, WcStatus::LocProtErr, WcOpcode::Recv, 0x12)
    );
    assert_eq!(wc_status(syn::WR_FLUSH_ERR), WcStatus::WrFlushErr);
}

#[test]
fn responder_cqes() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let wrs: Vec<_> = (0..4)
        .map(|i| RecvWr {
            wr_id: 10 + i,
            sg_list: &SG,
        })
        .collect();
    r.dev.post_recv(&mut r.qp, &wrs).unwrap();
    r.cqe(resp(cop::RESP_SEND, qpn, 0, 60));
    let mut c = resp(cop::RESP_SEND_IMM, qpn, 1, 64);
    c.imm_inval_pkey = Be32(*b"\x01\x02\x03\x04");
    r.cqe(c);
    let mut c = resp(cop::RESP_WR_IMM, qpn, 2, 1 << 20);
    c.imm_inval_pkey = Be32(*b"\x0a\x0b\x0c\x0d");
    r.cqe(c);
    let mut c = resp(cop::RESP_SEND_INV, qpn, 3, 0);
    c.imm_inval_pkey = Be32::new(0x1234);
    r.cqe(c);
    let wc = r.poll(8).unwrap();
    assert_eq!(wc.len(), 4);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].wc_flags),
        (10, WcOpcode::Recv, 60, WcFlags::empty())
    );
    assert_eq!(wc[1].wc_flags, WcFlags::WITH_IMM);
    assert_eq!(wc[1].imm_data.to_ne_bytes(), [1, 2, 3, 4]);
    // an RDMA write with immediate: its length is the write's, not bounded by the buffer
    assert_eq!(
        (wc[2].opcode, wc[2].byte_len, wc[2].imm_data.to_ne_bytes()),
        (WcOpcode::RecvRdmaWithImm, 1 << 20, [10, 11, 12, 13])
    );
    assert_eq!(
        (wc[3].wc_flags, wc[3].imm_data),
        (WcFlags::WITH_INV, 0x1234)
    );
    assert_eq!(r.qp.rq_consumer(), 4);
    assert_eq!(wc[0].src_qp, 0, "RC has no source QP");
}

#[test]
fn ud_responder_fields() {
    let mut r = rig_with(ServiceType::Ud, 3, 3, 2, false);
    let qpn = r.qp.qpn();
    let grh_buf = [Sge {
        addr: 0x4000,
        length: 40 + 1024,
        lkey: 3,
    }];
    r.dev
        .post_recv(
            &mut r.qp,
            &[RecvWr {
                wr_id: 5,
                sg_list: &grh_buf,
            }],
        )
        .unwrap();
    let mut c = resp(cop::RESP_SEND, qpn, 0, 40 + 100);
    c.flags_rqpn = Be32::new((1 << cqe::GRH_SHIFT) | (2 << 24) | 0xab_cdef);
    c.imm_inval_pkey = Be32::new(0xffff);
    c.l4_l3_hdr_type = cqe::VLAN_PRESENT;
    c.vlan_info = Be16::new(5 << 13 | 100);
    r.cqe(c);
    let wc = r.poll(1).unwrap();
    assert_eq!(wc[0].src_qp, 0xab_cdef);
    assert_eq!(wc[0].wc_flags, WcFlags::GRH);
    assert_eq!(wc[0].byte_len, 140);
    assert_eq!(wc[0].pkey_index, 0xffff);
    assert_eq!(wc[0].sl, 5);
}

#[test]
fn malformed_cqes_are_errors_never_panics() {
    let mut r = rig(4);
    let qpn = r.qp.qpn();
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        remote: RemoteOp::Rdma {
            remote_addr: 1,
            rkey: 2,
        },
        ..signaled(0, &SG)
    };
    r.post(&[read]).unwrap(); // WQE 0, 64 bytes to read
    let fmt = |mut c: Cqe64, f: u8| {
        c.op_own |= f;
        c
    };
    let mut big = req(qpn, 0, wqe::opcode::RDMA_READ);
    big.byte_cnt = Be32::new(65);
    let cases: Vec<(Cqe64, CqeFault)> = vec![
        (
            req(0x99, 0, wqe::opcode::RDMA_READ),
            CqeFault::UnknownQp { qpn: 0x99 },
        ),
        (
            req(qpn, 1, wqe::opcode::RDMA_READ),
            CqeFault::WqeCounter {
                qpn,
                wqe_counter: 1,
            },
        ),
        (
            req(qpn, 0xffff, wqe::opcode::RDMA_READ),
            CqeFault::WqeCounter {
                qpn,
                wqe_counter: 0xffff,
            },
        ),
        (
            req(qpn, 0, wqe::opcode::SEND),
            CqeFault::SendOpcode {
                qpn,
                posted: wqe::opcode::RDMA_READ,
                found: wqe::opcode::SEND,
            },
        ),
        (
            big,
            CqeFault::ByteCount {
                qpn,
                byte_cnt: 65,
                posted: 64,
            },
        ),
        (resp(cop::RESP_SEND, qpn, 0, 1), CqeFault::RqEmpty { qpn }),
        (
            resp(cop::RESIZE_CQ, qpn, 0, 1),
            CqeFault::Opcode {
                op_own: cop::RESIZE_CQ << 4,
            },
        ),
        (resp(7, qpn, 0, 1), CqeFault::Opcode { op_own: 7 << 4 }),
        (
            resp(cop::SIG_ERR, qpn, 0, 1),
            CqeFault::Opcode {
                op_own: cop::SIG_ERR << 4,
            },
        ),
        (
            fmt(req(qpn, 0, wqe::opcode::RDMA_READ), cqe::FORMAT_COMPRESSED),
            CqeFault::Format {
                op_own: cqe::FORMAT_COMPRESSED,
            },
        ),
    ];
    for (i, (c, fault)) in cases.iter().enumerate() {
        r.cqe(*c);
        let e = r.poll(4).unwrap_err();
        assert_eq!(bad(e), *fault, "case {i}");
        assert!(matches!(e, Error::BadCqe { ci, .. } if ci == i as u32));
        assert_eq!(e.errno(), 5);
        assert_eq!(verbs::Error::from(e), verbs::Error::Io);
        // consumed: the ring moves on
        assert_eq!(r.cq.consumer_index(), i as u32 + 1);
    }
    assert_eq!(r.cq.bad_cqes().0, cases.len() as u64);
    // nothing was retired by them
    assert_eq!(r.qp.sq_consumer(), 0);

    // responder: the counter must name the next receive WQE
    r.dev
        .post_recv(
            &mut r.qp,
            &[RecvWr {
                wr_id: 1,
                sg_list: &SG,
            }],
        )
        .unwrap();
    r.cqe(resp(cop::RESP_SEND, qpn, 5, 1));
    assert_eq!(
        bad(r.poll(1).unwrap_err()),
        CqeFault::WqeCounter {
            qpn,
            wqe_counter: 5
        }
    );
    r.cqe(resp(cop::RESP_SEND, qpn, 0, 65));
    assert_eq!(
        bad(r.poll(1).unwrap_err()),
        CqeFault::ByteCount {
            qpn,
            byte_cnt: 65,
            posted: 64
        }
    );

    // good completions before a bad one come first; the error comes next call
    let mut ok = req(qpn, 0, wqe::opcode::RDMA_READ);
    ok.byte_cnt = Be32::new(64);
    r.cqe(ok);
    r.cqe(req(0x98, 0, 0));
    r.cqe(resp(cop::RESP_SEND, qpn, 0, 64));
    let wc = r.poll(4).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].opcode, wc[0].byte_len), (WcOpcode::RdmaRead, 64));
    assert_eq!(
        bad(r.poll(4).unwrap_err()),
        CqeFault::UnknownQp { qpn: 0x98 }
    );
    let wc = r.poll(4).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].opcode), (1, WcOpcode::Recv));
}

#[test]
fn cqe_of_a_queue_on_another_cq_is_refused() {
    let b = bench();
    let dev = b.probe().unwrap();
    let eqn = dev.driver_eqn().unwrap();
    let scq = dev.create_cq(3, eqn).unwrap();
    let rcq = dev.create_cq(3, eqn).unwrap();
    let mut qp = dev
        .create_qp(&QpCreate {
            send_cqn: scq.cqn(),
            recv_cqn: rcq.cqn(),
            ..QpCreate::default()
        })
        .unwrap();
    assert_eq!(
        dev.attach_qp(&mut qp, &rcq, &scq),
        Err(Error::InvalidArgument)
    );
    dev.attach_qp(&mut qp, &scq, &rcq).unwrap();
    assert_eq!(
        dev.attach_qp(&mut qp, &scq, &rcq),
        Err(Error::InvalidArgument)
    );
    let qpn = qp.qpn();
    let c = resp(cop::RESP_SEND, qpn, 0, 1);
    cq_ring(&scq).write(0, &c.to_bytes()).unwrap();
    let e = scq.poll(&mut [WorkCompletion::default(); 1]).unwrap_err();
    assert_eq!(
        bad(e),
        CqeFault::WrongQueue {
            qpn,
            opcode: cop::RESP_SEND
        }
    );
    let c = req(qpn, 0, 0);
    cq_ring(&rcq).write(0, &c.to_bytes()).unwrap();
    let e = rcq.poll(&mut [WorkCompletion::default(); 1]).unwrap_err();
    assert_eq!(
        bad(e),
        CqeFault::WrongQueue {
            qpn,
            opcode: cop::REQ
        }
    );
    // a CQ with a QP attached cannot go; after the QP it can
    assert_eq!(dev.destroy_qp(qp), Ok(()));
    assert_eq!(scq.attached_qps(), 0);
    dev.destroy_cq(scq).unwrap();
    dev.destroy_cq(rcq).unwrap();
}

#[test]
fn destroy_and_reset_drop_the_qp_s_cqes() {
    let mut r = rig(4);
    let other = r
        .dev
        .create_qp(&QpCreate {
            send_cqn: r.cq.cqn(),
            recv_cqn: r.cq.cqn(),
            ..QpCreate::default()
        })
        .unwrap();
    let mut other = other;
    r.dev.attach_qp(&mut other, &r.cq, &r.cq).unwrap();
    let m = QpModify::default();
    for t in [
        Transition::Rst2Init,
        Transition::Init2Rtr,
        Transition::Rtr2Rts,
    ] {
        r.dev.modify_qp(&mut other, t, &m).unwrap();
    }
    let (a, b) = (r.qp.qpn(), other.qpn());
    r.post(&[signaled(1, &SG), signaled(2, &SG)]).unwrap();
    r.dev
        .post_send(&mut other, &[signaled(10, &SG), signaled(11, &SG)])
        .unwrap();
    r.cqe(req(a, 0, wqe::opcode::SEND));
    r.cqe(req(b, 0, wqe::opcode::SEND));
    r.cqe(req(a, 1, wqe::opcode::SEND));
    r.cqe(req(b, 1, wqe::opcode::SEND));
    // destroying `other` discards its two CQEs; `a`'s are returned, no error
    r.dev.destroy_qp(other).unwrap();
    let wc = r.poll(8).unwrap();
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(r.cq.consumer_index(), 4);
    assert_eq!(r.cq.bad_cqes().0, 0);
    // a later CQE naming it is unknown
    r.cqe(req(b, 2, wqe::opcode::SEND));
    assert_eq!(bad(r.poll(1).unwrap_err()), CqeFault::UnknownQp { qpn: b });

    // RESET: pending CQEs dropped, positions back to 0
    r.post(&[signaled(3, &SG)]).unwrap();
    r.cqe(req(a, 2, wqe::opcode::SEND));
    r.dev
        .modify_qp(&mut r.qp, Transition::ToRst, &QpModify::default())
        .unwrap();
    assert!(r.poll(4).unwrap().is_empty());
    assert_eq!(r.qp.sq_producer(), 0);
    assert_eq!(r.qp.sq_consumer(), 0);
    assert_eq!(r.sq_dbrec(), 0);
    for t in [
        Transition::Rst2Init,
        Transition::Init2Rtr,
        Transition::Rtr2Rts,
    ] {
        r.dev.modify_qp(&mut r.qp, t, &QpModify::default()).unwrap();
    }
    r.post(&[signaled(4, &SG)]).unwrap();
    assert_eq!(r.ctrl(0).opmod_idx_opcode.get() >> 8, 0);
    r.cqe(req(a, 0, wqe::opcode::SEND));
    assert_eq!(r.poll(1).unwrap()[0].wr_id, 4);
}

// ------------------------------------------------------------------------------------------
// Arming, completion channels, async events

#[test]
fn arm_record_doorbell_and_completion_events() {
    let b = bench();
    let dev = b.probe().unwrap();
    let mut ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq_on(4, 0xc0ffee, Some(&ch)).unwrap();
    assert_eq!(cq.eqn(), ch.eqn());
    assert_eq!(ch.cqs(), 1);
    let uar = cq.uar() as usize;
    b.fw().mmio.clear();
    dev.req_notify_cq(&cq, false).unwrap();
    let v = cq_rec(&cq).read_be32(4).unwrap();
    assert_eq!(v, 0); // sn 0, REQ_NOT, ci 0
    let w = b.fw().mmio.clone();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].0, uar * 4096 + 0x20);
    let mut expect = [0u8; 8];
    expect[..4].copy_from_slice(&v.to_be_bytes());
    expect[4..].copy_from_slice(&cq.cqn().to_be_bytes());
    assert_eq!(w[0].1, expect);

    // the device fires: a COMP EQE on the channel's EQ
    assert_eq!(dev.get_cq_event(&mut ch).unwrap(), None);
    let mut e = [0u8; 64];
    e[eqe::TYPE] = eqe::event::COMP;
    e[eqe::COMP_CQN..eqe::COMP_CQN + 4].copy_from_slice(&cq.cqn().to_be_bytes());
    b.fw().post_eqe(ch.eqn(), e);
    let ev = dev.get_cq_event(&mut ch).unwrap().unwrap();
    assert_eq!((ev.cqn, ev.cq_context), (cq.cqn(), 0xc0ffee));
    assert_eq!(cq.arm_sn(), 1);
    assert_eq!(dev.get_cq_event(&mut ch).unwrap(), None);

    // re-arm for solicited only: sn 1, cmd 1 << 24, the current ci
    dev.req_notify_cq(&cq, true).unwrap();
    let v = cq_rec(&cq).read_be32(4).unwrap();
    assert_eq!(v, (1 << 28) | (1 << 24));
    let w = b.fw().mmio.clone();
    assert_eq!(&w.last().unwrap().1[..4], &v.to_be_bytes());

    // an event for a CQ not on the channel is dropped
    let mut e = [0u8; 64];
    e[eqe::TYPE] = eqe::event::COMP;
    e[eqe::COMP_CQN..eqe::COMP_CQN + 4].copy_from_slice(&0x55u32.to_be_bytes());
    b.fw().post_eqe(ch.eqn(), e);
    assert_eq!(dev.get_cq_event(&mut ch).unwrap(), None);
    assert_eq!(ch.stray_events(), 1);

    // the channel cannot go while the CQ uses it
    let (err, ch) = dev.destroy_comp_channel(ch).unwrap_err();
    assert_eq!(err, Error::Busy);
    dev.destroy_cq(cq).unwrap();
    dev.destroy_comp_channel(ch.unwrap()).unwrap();
}

#[test]
fn async_events_from_the_driver_eq() {
    let b = bench();
    let dev = b.probe().unwrap();
    let eqn = dev.driver_eqn().unwrap();
    let ev = |t: u8, f: &dyn Fn(&mut [u8; 64])| {
        let mut e = [0u8; 64];
        e[eqe::TYPE] = t;
        f(&mut e);
        b.fw().post_eqe(eqn, e);
    };
    ev(eqe::event::CQ_ERROR, &|e| e[0x23] = 0x11);
    ev(eqe::event::WQ_CATAS_ERROR, &|e| e[0x3b] = 0x12);
    ev(eqe::event::PORT_CHANGE, &|e| {
        e[eqe::SUB_TYPE] = eqe::PORT_ACTIVE;
        e[0x28] = 1 << 4;
    });
    ev(eqe::event::COMP, &|e| e[0x3b] = 0x11); // dropped: not an async event
    ev(eqe::event::COMM_EST, &|e| e[0x3b] = 0x13);
    let mut got = Vec::new();
    while let Some(a) = dev.get_async_event().unwrap() {
        got.push(a);
    }
    assert_eq!(
        got,
        [
            AsyncEvent {
                event_type: AsyncEventType::CqErr,
                element: AsyncElement::Cq(0x11)
            },
            AsyncEvent {
                event_type: AsyncEventType::QpFatal,
                element: AsyncElement::Qp(0x12)
            },
            AsyncEvent {
                event_type: AsyncEventType::PortActive,
                element: AsyncElement::Port(1)
            },
            AsyncEvent {
                event_type: AsyncEventType::CommEst,
                element: AsyncElement::Qp(0x13)
            },
        ]
    );
}

// ------------------------------------------------------------------------------------------
// The verbs provider

#[test]
fn provider_end_to_end_over_the_fake() {
    use verbs::{CompletionQueue, MemoryRegion, Provider, QueuePair};
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let mem = Provider::alloc_buf(&dev, 3 * 4096).unwrap();
    assert_eq!(mem.len(), 3 * 4096);
    assert_eq!(mem.addr() % 4096, 0);
    let mr = dev
        .reg_mr(
            &pd,
            mem.slice(100..100 + 8192).unwrap(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    assert_eq!((mr.addr(), mr.length()), (mem.addr() + 100, 8192));
    assert_eq!(mr.lkey(), mr.rkey());
    // the MR holds (a window of) the memory: writes through it are the user's writes
    let held = mr.buffer().unwrap();
    assert!(held.same_memory(&mem));
    held.write(0, b"via the mr").unwrap();
    assert_eq!(&mem.read_array::<10>(100).unwrap(), b"via the mr");
    // the contiguous range became its three pages
    let inp = b.fw().inputs[&firmware_interface::opcode::CREATE_MKEY].clone();
    assert_eq!(be64(&inp, 0x110), mem.addr());
    assert_eq!(be64(&inp, 0x120), mem.addr() + 8192);
    assert_eq!(
        dev.reg_mr(&pd, mem.clone(), AccessFlags::from_bits_retain(1 << 9))
            .unwrap_err(),
        verbs::Error::InvalidArgument
    );
    assert_eq!(
        dev.reg_mr(&pd, mem.slice(5..5).unwrap(), AccessFlags::LOCAL_WRITE)
            .unwrap_err(),
        verbs::Error::InvalidArgument
    );
    assert_eq!(
        Provider::alloc_buf(&dev, 0).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    // A contiguous range of more pages than one mkey translates (up to nearly 2^64 bytes) is
    // EINVAL before any page list is built; so is one whose end wraps.
    for (addr, length) in [
        (0x1000, 1u64 << 50),
        (0, u64::MAX),
        (0x1000, u64::MAX - 0x1000),
        (u64::MAX - 4095, 8192),
    ] {
        let raw = verbs::MemRegion {
            addr,
            length,
            pages: &[],
        };
        // SAFETY: each of these ranges is refused before the device hears of it, so nothing
        // is registered and no memory must stay alive.
        let r = unsafe { dev.reg_mr_raw(&pd, &raw, AccessFlags::LOCAL_WRITE) };
        assert_eq!(
            r.map(|m| m.length()),
            Err(verbs::Error::InvalidArgument),
            "{addr:#x} + {length:#x}"
        );
    }

    let mut ch = Provider::create_comp_channel(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 10, 7, Some(&ch)).unwrap();
    assert_eq!(cq.cqe(), 15);
    assert_eq!(CompletionQueue::cq_context(&cq), 7);
    assert_eq!(
        Provider::create_cq(&dev, 0, 0, None).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 100,
            max_recv_wr: 10,
            max_send_sge: 3,
            max_recv_sge: 2,
            max_inline_data: 60,
        },
        sq_sig_all: false,
    };
    let (mut qp, cap) = Provider::create_qp(&dev, &pd, &init).unwrap();
    // 32 + max(48, 64) = 96 -> 128 bytes = 2 WQEBBs; 200 -> 256 WQEBBs
    assert_eq!(qp.sq_wqebbs(), 256);
    assert_eq!(
        cap,
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 16,
            max_send_sge: 6,
            max_recv_sge: 2,
            max_inline_data: 92,
        }
    );
    assert_eq!(QueuePair::cap(&qp), cap);
    assert!(qp.blueflame(), "a UAR of its own");
    assert_ne!(qp.uar(), dev.driver_uar().unwrap());
    // too big
    for c in [
        QpCap {
            max_send_sge: 100,
            ..init.cap
        },
        QpCap {
            max_inline_data: 2000,
            ..init.cap
        },
        QpCap {
            max_send_wr: 1 << 20,
            ..init.cap
        },
        QpCap {
            max_recv_sge: 64,
            ..init.cap
        },
    ] {
        assert!(Provider::create_qp(&dev, &pd, &QpInitAttr { cap: c, ..init }).is_err());
    }

    // the state machine, with the table's masks
    let rc = verbs::rc::RcParams {
        access: AccessFlags::REMOTE_WRITE,
        dest_qp_num: qp.qpn(),
        path_mtu: verbs::Mtu::Mtu4096,
        rq_psn: 0x100,
        max_dest_rd_atomic: 4,
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4([127, 0, 0, 1]),
            is_global: true,
            port_num: 1,
            dmac: [2, 0, 0, 0, 0, 7],
            hop_limit: 64,
            ..AhAttr::default()
        },
        sq_psn: 0x200,
        max_rd_atomic: 4,
        ..verbs::rc::RcParams::default()
    };
    let (a, m) = rc.init_attr();
    assert_eq!(
        Provider::modify_qp(&dev, &mut qp, &a, M::STATE | M::PORT),
        Err(verbs::Error::InvalidArgument)
    );
    Provider::modify_qp(&dev, &mut qp, &a, m).unwrap();
    // RTR without restating the access flags: they stay as INIT set them
    let (a, m) = rc.rtr_attr();
    Provider::modify_qp(&dev, &mut qp, &a, m.difference(M::ACCESS_FLAGS)).unwrap();
    let inp = b.fw().inputs[&firmware_interface::opcode::INIT2RTR_QP].clone();
    use firmware_interface::ctx::qpc;
    let q = |f: firmware_interface::Field| f.at(0x18).get(&inp);
    assert_eq!(q(qpc::MTU), qpc::MTU_4096);
    assert_eq!(q(qpc::REMOTE_QPN), qp.qpn());
    assert_eq!(q(qpc::RWE), 1, "access flags kept from RESET->INIT");
    let (a, m) = rc.rts_attr();
    Provider::modify_qp(&dev, &mut qp, &a, m).unwrap();
    assert_eq!(QueuePair::state(&qp), verbs::QpState::Rts);
    assert_eq!(
        Provider::modify_qp(&dev, &mut qp, &a, M::ALT_PATH),
        Err(verbs::Error::NotSupported)
    );
    let got = Provider::query_qp(&dev, &qp).unwrap();
    assert_eq!(got.qp_state, verbs::QpState::Rts);
    assert_eq!(got.dest_qp_num, qp.qpn());
    assert_eq!(got.cap, cap);

    // post and poll through the trait
    let sge = [Sge {
        addr: mem.addr() + 100,
        length: 64,
        lkey: mr.lkey(),
    }];
    Provider::post_recv(
        &dev,
        &mut qp,
        &[RecvWr {
            wr_id: 77,
            sg_list: &sge,
        }],
    )
    .unwrap();
    Provider::post_send(&dev, &mut qp, &[signaled(66, &sge)]).unwrap();
    let qpn = qp.qpn();
    cq_ring(&cq)
        .write(0, &req(qpn, 0, wqe::opcode::SEND).to_bytes())
        .unwrap();
    cq_ring(&cq)
        .write(64, &resp(cop::RESP_SEND, qpn, 0, 64).to_bytes())
        .unwrap();
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(Provider::poll_cq(&dev, &cq, &mut wc), Ok(2));
    assert_eq!((wc[0].wr_id, wc[1].wr_id), (66, 77));
    Provider::req_notify_cq(&dev, &cq, false).unwrap();
    assert_eq!(Provider::get_cq_event(&dev, &mut ch), Ok(None));

    // a CQ with a QP cannot go, and comes back
    let e = Provider::destroy_cq(&dev, cq).unwrap_err();
    assert_eq!(e.error, verbs::Error::Busy);
    let cq = e.object.unwrap();
    let uars = b.fw().log.len();
    Provider::destroy_qp(&dev, qp).unwrap();
    // its own UAR was freed with it
    assert!(
        b.fw().log[uars..]
            .iter()
            .any(|&(o, _)| o == firmware_interface::opcode::DEALLOC_UAR)
    );
    let e = Provider::destroy_comp_channel(&dev, ch).unwrap_err();
    assert_eq!(e.error, verbs::Error::Busy);
    let ch = e.object.unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::destroy_comp_channel(&dev, ch).unwrap();
    Provider::dereg_mr(&dev, mr).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
}

#[test]
fn registered_memory_outlives_a_failed_deregistration() {
    use firmware_interface::{cmd_status, mbox_out, opcode};
    use verbs::{MemoryRegion, Provider};
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let live = b.heap.live_buffers();
    let mem = Provider::alloc_buf(&dev, 8192).unwrap();
    let iova = mem.addr();
    let mr = dev
        .reg_mr(&pd, mem.clone(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    // the user lets go of its handle: the MR keeps the memory
    drop(mem);
    assert_eq!(b.heap.live_buffers(), live + 1);

    // the firmware refuses DESTROY_MKEY: the MR comes back, with its memory
    b.hook(on(
        opcode::DESTROY_MKEY,
        Reply::ok(out_with(16, |o| {
            mbox_out::STATUS.set(o, cmd_status::BAD_RES_STATE as u32);
        })),
    ));
    let e = Provider::dereg_mr(&dev, mr).unwrap_err();
    assert_eq!(e.error, verbs::Error::InvalidArgument);
    let mr = e.object.expect("a refused destroy hands the MR back");
    assert_eq!(mr.buffer().unwrap().addr(), iova);
    assert_eq!(b.heap.live_buffers(), live + 1);

    // the command times out: the key may be live, the MR is gone, the memory is leaked
    b.hook(on(
        opcode::DESTROY_MKEY,
        Reply {
            hang: true,
            ..Default::default()
        },
    ));
    let e = Provider::dereg_mr(&dev, mr).unwrap_err();
    assert_eq!(e.error, verbs::Error::TimedOut);
    assert!(e.object.is_none());
    drop(e);
    // no handle is left anywhere, yet the block is still allocated (not freed, not reused)...
    assert_eq!(b.heap.live_buffers(), live + 1);
    let other = Provider::alloc_buf(&dev, 8192).unwrap();
    assert_ne!(other.addr(), iova);
    // ...so the device's late DMA through the key lands in memory nobody else owns
    b.fw().write(iova + 4096, &[0xee; 64]);
    assert_eq!(b.fw().read(iova + 4096, 64), vec![0xee; 64]);
    assert_eq!(other.read_u8(0), Ok(0));
}

#[test]
fn an_mr_dropped_without_deregistration_leaks_its_memory() {
    use verbs::Provider;
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let live = b.heap.live_buffers();
    let mem = Provider::alloc_buf(&dev, 4096).unwrap();
    let mr = dev.reg_mr(&pd, mem, AccessFlags::LOCAL_WRITE).unwrap();
    drop(mr);
    assert_eq!(
        b.heap.live_buffers(),
        live + 1,
        "the key is live: memory kept"
    );

    // deregistered: the memory goes with the last handle
    let mem = Provider::alloc_buf(&dev, 4096).unwrap();
    let mr = dev
        .reg_mr(&pd, mem.clone(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    Provider::dereg_mr(&dev, mr).unwrap();
    assert_eq!(b.heap.live_buffers(), live + 2);
    drop(mem);
    assert_eq!(b.heap.live_buffers(), live + 1);
}

#[test]
fn memory_of_another_device_address_space_is_refused() {
    use verbs::Provider;
    let (b1, b2) = (bench(), bench());
    let (d1, d2) = (b1.probe().unwrap(), b2.probe().unwrap());
    let pd = Provider::alloc_pd(&d1).unwrap();
    let foreign = Provider::alloc_buf(&d2, 4096).unwrap();
    assert_eq!(
        d1.reg_mr(&pd, foreign, AccessFlags::LOCAL_WRITE)
            .unwrap_err(),
        verbs::Error::InvalidArgument
    );
    let own = Provider::alloc_buf(&d1, 4096).unwrap();
    let mr = d1.reg_mr(&pd, own, AccessFlags::LOCAL_WRITE).unwrap();
    Provider::dereg_mr(&d1, mr).unwrap();
}

#[test]
fn rc_connect_helper_brings_a_qp_to_rts_or_stops_where_refused() {
    use verbs::rc::{RcParams, connect, rtr_rts};
    use verbs::{Provider, QueuePair};
    let b = bench();
    let dev = b.probe().unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 16, 0, None).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let (mut qp, _) = Provider::create_qp(&dev, &pd, &init).unwrap();
    let good = RcParams {
        access: AccessFlags::REMOTE_READ,
        dest_qp_num: 0x4321,
        rq_psn: 0x77,
        sq_psn: 0x99,
        max_dest_rd_atomic: 1,
        max_rd_atomic: 1,
        ..RcParams::default()
    };
    // a PSN above 24 bits: INIT is reached, RTR refused, the QP stays in INIT
    let bad = RcParams {
        rq_psn: 1 << 24,
        ..good
    };
    assert_eq!(
        connect(&dev, &mut qp, &bad),
        Err(verbs::Error::InvalidArgument)
    );
    assert_eq!(QueuePair::state(&qp), verbs::QpState::Init);
    // from INIT, the last two transitions
    rtr_rts(&dev, &mut qp, &good).unwrap();
    assert_eq!(QueuePair::state(&qp), verbs::QpState::Rts);
    use firmware_interface::ctx::qpc;
    let rtr = b.fw().inputs[&firmware_interface::opcode::INIT2RTR_QP].clone();
    let q = |inp: &[u8], f: firmware_interface::Field| f.at(0x18).get(inp);
    assert_eq!(q(&rtr, qpc::REMOTE_QPN), 0x4321);
    assert_eq!(q(&rtr, qpc::NEXT_RCV_PSN), 0x77);
    // the access restated at RTR is an optional parameter of the command
    assert_eq!((q(&rtr, qpc::RRE), q(&rtr, qpc::RWE)), (1, 0));
    let rts = b.fw().inputs[&firmware_interface::opcode::RTR2RTS_QP].clone();
    assert_eq!(q(&rts, qpc::NEXT_SEND_PSN), 0x99);
    assert_eq!(q(&rts, qpc::RETRY_COUNT), 7);
    let got = Provider::query_qp(&dev, &qp).unwrap();
    assert_eq!(got.dest_qp_num, 0x4321);
    assert_eq!(got.qp_access_flags, AccessFlags::REMOTE_READ);
    Provider::destroy_qp(&dev, qp).unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
}

#[test]
fn provider_ud_qp_and_port_queries() {
    use verbs::Provider;
    let b = bench();
    let dev = b.probe().unwrap();
    let p = Provider::query_port(&dev, 1).unwrap();
    assert_eq!(p.link_layer, verbs::LinkLayer::Ethernet);
    assert_eq!(p.state, verbs::PortState::Active);
    assert_eq!(p.active_mtu, verbs::Mtu::Mtu1024, "Ethernet MTU 1500");
    assert_eq!(p.max_mtu, verbs::Mtu::Mtu4096);
    assert_eq!(p.gid_tbl_len, 16);
    assert_eq!(
        Provider::query_port(&dev, 2).unwrap_err(),
        verbs::Error::InvalidArgument
    );
    let gid = Gid::from_ipv4([10, 0, 0, 7]);
    dev.set_roce_gid(2, gid.0, [2, 0, 0, 0, 0, 7]).unwrap();
    assert_eq!(Provider::query_gid(&dev, 1, 2).unwrap(), gid);
    assert!(Provider::query_gid(&dev, 1, 3).unwrap().is_zero());
    assert!(Provider::query_gid(&dev, 1, 16).is_err());

    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 64, 0, None).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Ud,
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
    };
    let (mut qp, cap) = Provider::create_qp(&dev, &pd, &init).unwrap();
    // 64 + 16 -> 128 bytes
    assert_eq!(
        (cap.max_send_wr, cap.max_send_sge, cap.max_inline_data),
        (8, 4, 60)
    );
    let mut a = QpAttr {
        qp_state: verbs::QpState::Init,
        port_num: 1,
        qkey: 0x11,
        ..QpAttr::default()
    };
    Provider::modify_qp(
        &dev,
        &mut qp,
        &a,
        M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY,
    )
    .unwrap();
    a.qp_state = verbs::QpState::Rtr;
    Provider::modify_qp(&dev, &mut qp, &a, M::STATE).unwrap();
    a.qp_state = verbs::QpState::Rts;
    a.qkey = 0x22;
    Provider::modify_qp(&dev, &mut qp, &a, M::STATE | M::SQ_PSN | M::QKEY).unwrap();
    assert_eq!(qp.qkey(), 0x22, "the optional Q_Key of RTR->RTS");
    let ah = Provider::create_ah(
        &dev,
        &pd,
        &AhAttr {
            dgid: gid,
            is_global: true,
            port_num: 1,
            dmac: [2, 0, 0, 0, 0, 8],
            ..AhAttr::default()
        },
    )
    .unwrap();
    // sq_sig_all: an unsignalled request still asks for a CQE
    let wr = SendWr {
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 9,
            remote_qkey: 0x8000_0000,
        }),
        ..send(1, &SG)
    };
    Provider::post_send(&dev, &mut qp, &[wr]).unwrap();
    let mut c = [0u8; 16];
    qp.buffer().read(qp.sq_offset(), &mut c).unwrap();
    assert_eq!(CtrlSeg::from_bytes(&c).fm_ce_se, wqe::CE_CQ_UPDATE);
    qp.buffer().read(qp.sq_offset() + 16, &mut c).unwrap();
    assert_eq!(&c[..4], &0x22u32.to_be_bytes());
    Provider::destroy_ah(&dev, ah).unwrap();
    Provider::destroy_qp(&dev, qp).unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
}

#[test]
fn blueflame_can_be_turned_off() {
    use verbs::Provider;
    let b = bench();
    let dev = b
        .probe_with(Config {
            blueflame: false,
            ..test_config()
        })
        .unwrap();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 8, 0, None).unwrap();
    let (qp, _) = Provider::create_qp(
        &dev,
        &pd,
        &QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )
    .unwrap();
    assert!(!qp.blueflame());
    assert_eq!(qp.uar(), dev.driver_uar().unwrap());
    Provider::destroy_qp(&dev, qp).unwrap();
    Provider::destroy_cq(&dev, cq).unwrap();
}

// ------------------------------------------------------------------------------------------
// Fast paths against the general ones

/// Walks the WQEs of `r`'s SQ from position 0 to the producer: (position, ds) of each.
fn wqes(r: &Rig) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut p = 0;
    while p != r.qp.sq_producer() {
        let ds = r.ctrl(p).qpn_ds.get() & 0x3f;
        assert!(ds > 0, "WQE at {p} has ds 0");
        out.push((p, ds));
        p += ds.div_ceil(4);
    }
    out
}

/// An RC QP does not read `dest` (its destination is the connection): a request naming one
/// is posted as the same request without, by the fast path and by the general one.
#[test]
fn an_rc_qp_does_not_read_the_destination() {
    let mut a = rig_with(ServiceType::Rc, 8, 4, 2, false);
    let mut b = rig_with(ServiceType::Rc, 8, 4, 2, false);
    let ah = a
        .dev
        .create_ah(
            a.dev.driver_pd().unwrap(),
            &AhAttr {
                dgid: Gid::from_ipv4([10, 1, 2, 3]),
                is_global: true,
                port_num: 1,
                dmac: [2, 0, 0, 0, 0, 9],
                ..AhAttr::default()
            },
        )
        .unwrap();
    let dest = Some(UdDest {
        ah: &ah,
        remote_qpn: 7,
        remote_qkey: 0x1111,
    });
    let rdma = RemoteOp::Rdma {
        remote_addr: 0x7000,
        rkey: 0x42,
    };
    let sg2 = [SG[0], SG[0]];
    let plain: Vec<SendWr<'_, Ah>> = [
        (WrOpcode::RdmaWrite, rdma, &SG[..]),
        (WrOpcode::Send, RemoteOp::None, &SG[..]),
        (WrOpcode::RdmaRead, rdma, &sg2[..]),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (opcode, remote, sg))| SendWr {
        wr_id: i as u64,
        opcode,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        remote,
        ..SendWr::default()
    })
    .collect();
    let named: Vec<_> = plain.iter().map(|w| SendWr { dest, ..*w }).collect();
    // Fast path with the destination, general path without; then the other way round.
    a.dev.post_send(&mut a.qp, &named).unwrap();
    b.dev.post_send_general(&mut b.qp, &plain).unwrap();
    a.dev.post_send_general(&mut a.qp, &named).unwrap();
    b.dev.post_send(&mut b.qp, &plain).unwrap();
    let list = wqes(&a);
    assert_eq!(list, wqes(&b));
    assert_eq!(list.len(), 2 * plain.len());
    for &(p, ds) in &list {
        for k in 0..ds {
            assert_eq!(a.unit(p, k), b.unit(p, k), "WQE at {p}, unit {k}");
        }
    }
}

#[test]
fn fast_path_writes_what_the_general_path_writes() {
    let mut a = rig_with(ServiceType::Rc, 8, 4, 2, false);
    let mut b = rig_with(ServiceType::Rc, 8, 4, 2, false);
    assert_eq!(a.qp.qpn(), b.qp.qpn());
    let qpn = a.qp.qpn();
    let sg3 = [
        Sge {
            addr: 0x1000,
            length: 100,
            lkey: 0x55,
        },
        Sge {
            addr: 0x2000,
            length: 0,
            lkey: 1,
        },
        Sge {
            addr: 0x3000_0000_0000,
            length: 7,
            lkey: 0x66,
        },
    ];
    let zero = [Sge {
        addr: 0x9000,
        length: 0,
        lkey: 3,
    }];
    let rdma = RemoteOp::Rdma {
        remote_addr: 0xaaaa_0000_1111,
        rkey: 0x4242,
    };
    let payload = [0xa5u8; 20];
    let mut wrs = Vec::new();
    for flags in [
        SendFlags::empty(),
        SendFlags::SIGNALED,
        SendFlags::FENCE | SendFlags::SIGNALED,
        SendFlags::SOLICITED | SendFlags::SIGNALED,
        SendFlags::FENCE | SendFlags::SOLICITED,
    ] {
        for (opcode, remote) in [
            (WrOpcode::Send, RemoteOp::None),
            (WrOpcode::SendWithImm, RemoteOp::None),
            (WrOpcode::SendWithInv, RemoteOp::None),
            (WrOpcode::RdmaWrite, rdma),
            (WrOpcode::RdmaWriteWithImm, rdma),
            (WrOpcode::RdmaRead, rdma),
        ] {
            for sg in [&SG[..], &sg3[..], &sg3[..2], &zero[..], &[][..]] {
                wrs.push(SendWr {
                    wr_id: wrs.len() as u64,
                    opcode,
                    flags,
                    sg_list: sg,
                    // copied for the *_WITH_IMM opcodes only
                    imm_data: 0xdead_beefu32.to_be(),
                    remote,
                    ..SendWr::default()
                });
            }
            if opcode != WrOpcode::RdmaRead {
                wrs.push(SendWr {
                    wr_id: wrs.len() as u64,
                    opcode,
                    flags: flags | SendFlags::INLINE,
                    inline_data: &payload,
                    remote,
                    ..SendWr::default()
                });
            }
        }
    }
    // one batch, the fast path taking some and leaving others to the general path
    a.dev.post_send(&mut a.qp, &wrs).unwrap();
    b.dev.post_send_general(&mut b.qp, &wrs).unwrap();
    assert_eq!(a.qp.sq_producer(), b.qp.sq_producer());
    assert_eq!(a.sq_dbrec(), b.sq_dbrec());
    assert_eq!(a.mmio(), b.mmio());
    let list = wqes(&a);
    assert_eq!(list, wqes(&b));
    assert_eq!(list.len(), wrs.len());
    for &(p, ds) in &list {
        for k in 0..ds {
            assert_eq!(a.unit(p, k), b.unit(p, k), "WQE at {p}, unit {k}");
        }
    }

    // the bookkeeping: completions of the signalled ones (each retiring the ones before)
    for (wr, &(p, _)) in wrs.iter().zip(&list) {
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        if !signaled {
            continue;
        }
        let op = (a.ctrl(p).opmod_idx_opcode.get() & 0xff) as u8;
        for r in [&mut a, &mut b] {
            let mut c = req(qpn, p as u16, op);
            if wr.opcode == WrOpcode::RdmaRead {
                let len: u32 = wr.sg_list.iter().map(|s| s.length).sum();
                c.byte_cnt = Be32::new(len.min(5));
            }
            r.cqe(c);
        }
        let (wa, wb) = (a.poll(2).unwrap(), b.poll(2).unwrap());
        assert_eq!(wa, wb);
        assert_eq!(wa.len(), 1);
        assert_eq!(wa[0].wr_id, wr.wr_id);
        assert_eq!(a.qp.sq_consumer(), b.qp.sq_consumer());
    }

    // a batch that does not fit: the same error at the same index
    let mut a = rig(4);
    let mut b = rig(4);
    let batch: Vec<_> = (0..20).map(|i| signaled(i, &SG)).collect();
    let ea = a.dev.post_send(&mut a.qp, &batch).unwrap_err();
    let eb = b.dev.post_send_general(&mut b.qp, &batch).unwrap_err();
    assert_eq!(ea, (Error::QueueFull, 16));
    assert_eq!(ea, eb);
    assert_eq!(a.qp.sq_producer(), 16);
    assert_eq!(b.qp.sq_producer(), 16);
    // and the fast path picks up again once the poller has retired some
    for r in [&mut a, &mut b] {
        r.cqe(req(r.qp.qpn(), 3, wqe::opcode::SEND));
        assert_eq!(r.poll(4).unwrap()[0].wr_id, 3);
    }
    a.dev.post_send(&mut a.qp, &batch[16..]).unwrap();
    b.dev.post_send_general(&mut b.qp, &batch[16..]).unwrap();
    // (the fast path's send writes its data segment twice: compare the units `ds` names)
    for p in 16..20 {
        assert_eq!(a.unit(p, 0), b.unit(p, 0), "WQEBB {p}");
        assert_eq!(a.unit(p, 1), b.unit(p, 1), "WQEBB {p}");
        assert_eq!(a.ctrl(p).qpn_ds.get() & 0x3f, 2);
    }
}

#[test]
fn fast_paths_refuse_what_the_general_path_refuses() {
    let mut r = rig(4);
    let payload = [1u8; 4];
    let rdma = RemoteOp::Rdma {
        remote_addr: 1,
        rkey: 2,
    };
    let many = [SG[0]; 64];
    let bad = [
        // inline data without INLINE
        SendWr {
            inline_data: &payload,
            ..send(0, &SG)
        },
        // a remote part the opcode does not take, and the reverse
        SendWr {
            remote: rdma,
            ..send(0, &SG)
        },
        SendWr {
            opcode: WrOpcode::RdmaWrite,
            ..send(0, &SG)
        },
        // atomics on an RC QP need their own remote part
        SendWr {
            opcode: WrOpcode::AtomicFetchAndAdd,
            remote: rdma,
            ..send(0, &SG)
        },
        // more SGEs than the QP takes
        send(0, &many),
    ];
    for (i, wr) in bad.iter().enumerate() {
        let e = r.dev.post_send(&mut r.qp, &[signaled(9, &SG), *wr]);
        assert_eq!(e, Err((Error::InvalidArgument, 1)), "case {i}");
    }
    assert_eq!(r.qp.sq_producer(), bad.len() as u32);
}

/// A second RC QP on `r`'s CQ, in RTS.
fn second_qp(r: &Rig) -> Qp {
    let mut qp = r
        .dev
        .create_qp(&QpCreate {
            service: ServiceType::Rc,
            pd: r.dev.driver_pd().unwrap(),
            send_cqn: r.cq.cqn(),
            recv_cqn: r.cq.cqn(),
            log_sq_size: 4,
            log_rq_size: 4,
            log_rq_stride: 2,
            uar: None,
            blueflame: false,
        })
        .unwrap();
    r.dev.attach_qp(&mut qp, &r.cq, &r.cq).unwrap();
    let m = QpModify::default();
    r.dev.modify_qp(&mut qp, Transition::Rst2Init, &m).unwrap();
    r.dev.modify_qp(&mut qp, Transition::Init2Rtr, &m).unwrap();
    r.dev.modify_qp(&mut qp, Transition::Rtr2Rts, &m).unwrap();
    qp
}

#[test]
fn fast_poll_loop_hands_over_to_the_general_loop() {
    let mut r = rig(4);
    let mut q2 = second_qp(&r);
    let (n1, n2) = (r.qp.qpn(), q2.qpn());
    let write = |id| SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote: RemoteOp::Rdma {
            remote_addr: 0x10,
            rkey: 7,
        },
        ..signaled(id, &SG)
    };
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        ..write(3)
    };
    r.post(&[write(0), write(1), signaled(2, &SG), read, write(4)])
        .unwrap();
    r.dev
        .post_send(&mut q2, &[write(10), write(11), write(12)])
        .unwrap();
    let (w, s, rd) = (
        wqe::opcode::RDMA_WRITE,
        wqe::opcode::SEND,
        wqe::opcode::RDMA_READ,
    );
    let mut rd_cqe = req(n1, 3, rd);
    rd_cqe.byte_cnt = Be32::new(64);
    // QP 1, QP 2, QP 1 again, a read (the general loop's), then a bad opcode
    for c in [
        req(n1, 0, w),
        req(n1, 1, w),
        req(n2, 0, w),
        req(n2, 1, w),
        req(n1, 2, s),
        rd_cqe,
        req(n2, 2, w),
        req(n1, 4, s),
    ] {
        r.cqe(c);
    }
    // a short `wc` stops the fast loop without consuming more
    let wc = r.poll(3).unwrap();
    let ids: Vec<_> = wc.iter().map(|w| (w.wr_id, w.qp_num)).collect();
    assert_eq!(ids, [(0, n1), (1, n1), (10, n2)]);
    assert_eq!(r.cq.consumer_index(), 3);
    let wc = r.poll(16).unwrap();
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        got,
        [
            (11, WcOpcode::RdmaWrite, WcStatus::Success),
            (2, WcOpcode::Send, WcStatus::Success),
            (3, WcOpcode::RdmaRead, WcStatus::Success),
            (12, WcOpcode::RdmaWrite, WcStatus::Success),
        ]
    );
    // `byte_len` is defined for the read only.
    assert_eq!(wc[2].byte_len, 64);
    // the last CQE names WQE 4 with the wrong opcode: consumed, reported next
    assert_eq!(
        bad(r.poll(16).unwrap_err()),
        CqeFault::SendOpcode {
            qpn: n1,
            posted: w,
            found: s
        }
    );
    assert_eq!(r.cq.consumer_index(), 8);
    assert_eq!(r.qp.sq_consumer(), 4);
    assert_eq!(q2.sq_consumer(), 3);
    // nothing left
    assert_eq!(r.poll(16).unwrap().len(), 0);
    r.dev.destroy_qp(q2).unwrap();
}

#[test]
fn fast_poll_loop_crosses_the_end_of_the_cq_ring() {
    let mut r = rig(5); // 32 WQEBBs; the CQ has 16 entries
    let qpn = r.qp.qpn();
    let mut next = 0u64;
    // 10, then 12 (entries 10..16 and 0..6 of the second pass), then 16 (a full pass)
    for n in [10u64, 12, 16] {
        let wrs: Vec<_> = (next..next + n).map(|i| signaled(i, &SG)).collect();
        r.post(&wrs).unwrap();
        for i in next..next + n {
            r.cqe(req(qpn, i as u16, wqe::opcode::SEND));
        }
        let wc = r.poll(16).unwrap();
        let ids: Vec<_> = wc.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (next..next + n).collect::<Vec<_>>());
        next += n;
        assert_eq!(r.cq.consumer_index() as u64, next);
        assert_eq!(r.qp.sq_consumer() as u64, next);
        // the entry after the last still has the owner bit of its previous pass
        assert!(r.poll(4).unwrap().is_empty());
    }
}

#[test]
fn fast_poll_loop_writes_every_defined_field_over_old_contents() {
    let mut r = rig(4);
    let n1 = r.qp.qpn();
    let write = SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote: RemoteOp::Rdma {
            remote_addr: 0x10,
            rkey: 7,
        },
        ..signaled(5, &SG)
    };
    r.post(&[write, signaled(6, &SG)]).unwrap();
    r.cqe(req(n1, 0, wqe::opcode::RDMA_WRITE));
    r.cqe(req(n1, 1, wqe::opcode::SEND));
    // What an earlier poll may have left in the caller's slice.
    let old = WorkCompletion {
        wr_id: 99,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Recv,
        sl: 6,
        dlid_path_bits: 7,
        qp_num: 1,
        vendor_err: 5,
        wc_flags: WcFlags::GRH | WcFlags::WITH_IMM,
        byte_len: 777,
        imm_data: 1,
        src_qp: 3,
        pkey_index: 4,
        slid: 5,
    };
    let mut wc = [old; 2];
    assert_eq!(r.cq.poll(&mut wc).unwrap(), 2);
    let defined: Vec<_> = wc
        .iter()
        .map(|w| {
            (
                w.wr_id,
                w.status,
                w.opcode,
                w.qp_num,
                w.vendor_err,
                w.wc_flags,
            )
        })
        .collect();
    assert_eq!(
        defined,
        [
            (
                5,
                WcStatus::Success,
                WcOpcode::RdmaWrite,
                n1,
                0,
                WcFlags::empty()
            ),
            (
                6,
                WcStatus::Success,
                WcOpcode::Send,
                n1,
                0,
                WcFlags::empty()
            ),
        ]
    );
}

// ------------------------------------------------------------------------------------------
// Shared receive queues

/// The SRQ ring: initial links, posted WQEs (next segment, data segments), the doorbell
/// record counting posts, ENOMEM when only the tail is free; completions of a QP on the SRQ
/// resolved by `wqe_counter` within the SRQ, in any order, a WQE not posted (or completed
/// already) a bad CQE, a byte count beyond the buffer a bad CQE; completed WQEs linked back
/// after the tail; busy while a QP is on it.
#[test]
fn srq_ring_and_completions_by_wqe_index() {
    let mut r = rig(4);
    let pdn = r.dev.driver_pd().unwrap();
    let srq = r
        .dev
        .create_srq(
            pdn,
            &verbs::SrqAttr {
                max_wr: 3,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    // 4 WQEs of 32 bytes (next segment + one data segment), linked 0 → 1 → 2 → 3 → 0
    // next_wqe_index: bytes 2..4 of the WQE (the high half of its first word)
    let next_of = |srq: &Srq, i: usize| (srq_ring(srq).read_be32(i * 32).unwrap() & 0xffff) as u16;
    assert_eq!(
        (0..4).map(|i| next_of(&srq, i)).collect::<Vec<_>>(),
        [1, 2, 3, 0]
    );
    let mut qp = r
        .dev
        .create_qp_srq(
            &QpCreate {
                pd: pdn,
                send_cqn: r.cq.cqn(),
                recv_cqn: r.cq.cqn(),
                log_sq_size: 4,
                ..QpCreate::default()
            },
            &srq,
        )
        .unwrap();
    assert_eq!(qp.srqn(), Some(srq.srqn()));
    // another PD: refused before any command
    assert!(matches!(
        r.dev.create_qp_srq(
            &QpCreate {
                pd: pdn + 1,
                send_cqn: r.cq.cqn(),
                recv_cqn: r.cq.cqn(),
                ..QpCreate::default()
            },
            &srq
        ),
        Err(Error::InvalidArgument)
    ));
    r.dev.attach_qp(&mut qp, &r.cq, &r.cq).unwrap();
    let m = QpModify::default();
    r.dev.modify_qp(&mut qp, Transition::Rst2Init, &m).unwrap();
    assert!(matches!(
        r.dev.post_recv(
            &mut qp,
            &[RecvWr {
                wr_id: 1,
                sg_list: &SG
            }]
        ),
        Err((Error::InvalidArgument, 0))
    ));
    let wrs: Vec<_> = (0..4)
        .map(|i| RecvWr {
            wr_id: 100 + i,
            sg_list: &SG,
        })
        .collect();
    assert!(matches!(
        r.dev.post_srq_recv(&srq, &wrs),
        Err((Error::QueueFull, 3))
    ));
    assert_eq!(srq_rec(&srq).read_be32(0).unwrap(), 3);
    assert_eq!(srq.outstanding(), 3);
    for i in 0..3 {
        let mut b = [0u8; 16];
        srq_ring(&srq).read(i * 32 + 16, &mut b).unwrap();
        let d = DataSeg::from_bytes(&b);
        assert_eq!(
            (d.byte_count.get(), d.lkey.get(), d.addr.get()),
            (SG[0].length, SG[0].lkey, SG[0].addr)
        );
    }
    let qpn = qp.qpn();
    // WQE 1 completes first, then 0
    r.cqe(resp(cop::RESP_SEND, qpn, 1, 10));
    r.cqe(resp(cop::RESP_SEND, qpn, 0, 20));
    let wc = r.poll(4).unwrap();
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.byte_len, w.qp_num))
            .collect::<Vec<_>>(),
        [(101, 10, qpn), (100, 20, qpn)]
    );
    // linked back after the tail (3 → 1 → 0)
    assert_eq!((next_of(&srq, 3), next_of(&srq, 1)), (1, 0));
    assert_eq!(srq.outstanding(), 1);
    // a completed WQE cannot be retired again (what stops a second poller that looked it
    // up before the first retired it), and that changes nothing
    assert!(!srq.core.retire(1));
    assert_eq!((next_of(&srq, 3), next_of(&srq, 1)), (1, 0));
    assert_eq!(srq.outstanding(), 1);
    // the tail (never posted), a WQE completed already, a byte count beyond the buffer
    for (idx, len, counter) in [
        (3u16, 4u32, true),
        (1, 4, true),
        (2, SG[0].length + 1, false),
    ] {
        r.cqe(resp(cop::RESP_SEND, qpn, idx, len));
        let e = r.poll(4).unwrap_err();
        let f = bad(e);
        if counter {
            assert_eq!(
                f,
                CqeFault::WqeCounter {
                    qpn,
                    wqe_counter: idx
                }
            );
        } else {
            assert!(matches!(f, CqeFault::ByteCount { .. }), "{f:?}");
        }
    }
    // the bad byte count consumed nothing: WQE 2 is still posted and completes
    r.cqe(resp(cop::RESP_SEND, qpn, 2, 1));
    assert_eq!(r.poll(4).unwrap()[0].wr_id, 102);
    // three free again: posted at 3, 1, 0 (the list's order)
    r.dev.post_srq_recv(&srq, &wrs[..3]).unwrap();
    assert_eq!(srq_rec(&srq).read_be32(0).unwrap(), 6);
    r.cqe(resp(cop::RESP_SEND, qpn, 3, 1));
    r.cqe(resp(cop::RESP_SEND, qpn, 1, 1));
    r.cqe(resp(cop::RESP_SEND, qpn, 0, 1));
    let wc = r.poll(4).unwrap();
    assert_eq!(
        wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [100, 101, 102]
    );
    // busy while the QP is on it
    let srq = match r.dev.destroy_srq(srq) {
        Err((Error::Busy, Some(s))) => s,
        other => panic!("{:?}", other.map_err(|(e, _)| e)),
    };
    r.dev.destroy_qp(qp).unwrap();
    r.dev.destroy_srq(srq).unwrap();
}
