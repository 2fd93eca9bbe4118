//! Data-path tests: WQEs, doorbells, records and CQEs built by hand with firmware-interface
//! (no driver), on one device (internal loopback) and on two devices over the in-process
//! fabric.

mod fabric;
mod local;
mod segments;
mod ud;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use firmware_interface::cqe::{self, Cqe64, ErrCqe};
use firmware_interface::ctx::{ads, mkc, qpc};
use firmware_interface::eqe::{self, event};
use firmware_interface::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineHdr, RaddrSeg, opcode as wop,
};
use firmware_interface::{Be16, Be32, Be64, Field, cmds, opcode as op};

use super::objects::{gid_entry, set_gid};
use super::{H, msg, set, set64};
use crate::Profile;

/// mkc access bits (byte 2).
pub(crate) const LR: u8 = 1 << 2;
pub(crate) const LW: u8 = 1 << 3;
pub(crate) const RR: u8 = 1 << 4;
pub(crate) const RW: u8 = 1 << 5;
pub(crate) const RA: u8 = 1 << 6;
pub(crate) const ALL: u8 = LR | LW | RR | RW | RA;

const QPC: usize = 0x18;
const PATH: usize = QPC + 0x18;

fn q(f: Field) -> Field {
    f.at(QPC)
}

fn p(f: Field) -> Field {
    f.at(PATH)
}

/// A registered buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mr {
    pub addr: u64,
    pub len: u64,
    pub key: u32,
}

/// A CQ as the test (the "driver") sees it.
#[derive(Debug)]
pub(crate) struct TCq {
    pub cqn: u32,
    pub base: u64,
    pub dbr: u64,
    pub log: u32,
    pub ci: u32,
}

/// A QP as the test sees it.
#[derive(Debug)]
pub(crate) struct TQp {
    pub qpn: u32,
    pub base: u64,
    pub rq_bytes: u64,
    pub rq_n: u32,
    pub rq_stride: u64,
    pub sq_bbs: u32,
    pub dbr: u64,
    pub sq_pi: u16,
    pub rq_pi: u16,
    pub bf_off: usize,
}

/// A decoded CQE (success or error).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cqe {
    pub opcode: u8,
    pub owner: u8,
    pub se: bool,
    pub syndrome: u8,
    pub qpn: u32,
    pub send_opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    pub imm: u32,
    pub flags_rqpn: u32,
    pub uidx: u32,
}

impl Cqe {
    fn parse(b: &[u8; 64]) -> Cqe {
        let c = Cqe64::from_bytes(b);
        let e = ErrCqe::from_bytes(b);
        let opcode = cqe::opcode_of(c.op_own);
        let err = opcode == cqe::opcode::REQ_ERR || opcode == cqe::opcode::RESP_ERR;
        let sop = if err {
            e.s_wqe_opcode_qpn.get()
        } else {
            c.sop_drop_qpn.get()
        };
        Cqe {
            opcode,
            owner: c.op_own & cqe::OWNER_MASK,
            se: c.op_own & cqe::SE_MASK != 0,
            syndrome: if err { e.syndrome } else { 0 },
            qpn: sop & cqe::QPN_MASK,
            send_opcode: (sop >> 24) as u8,
            wqe_counter: c.wqe_counter.get(),
            byte_cnt: c.byte_cnt.get(),
            imm: c.imm_inval_pkey.get(),
            flags_rqpn: c.flags_rqpn.get(),
            uidx: c.srqn_uidx.get() & cqe::QPN_MASK,
        }
    }

    /// Asserts a requester success.
    #[track_caller]
    pub(crate) fn req_ok(&self, qpn: u32, send_opcode: u8, idx: u16) {
        assert_eq!(
            (self.opcode, self.qpn, self.send_opcode, self.wqe_counter),
            (cqe::opcode::REQ, qpn, send_opcode, idx),
            "requester CQE {self:x?}"
        );
    }

    /// Asserts an error CQE with `syndrome`.
    #[track_caller]
    pub(crate) fn err(&self, opcode: u8, syndrome: u8) {
        assert_eq!(
            (self.opcode, self.syndrome),
            (opcode, syndrome),
            "error CQE {self:x?}"
        );
    }
}

/// A work request, built into a WQE by [`Node::post_send`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Wr {
    pub opcode: u8,
    pub sges: Vec<(u64, u32, u32)>,
    pub inline: Option<Vec<u8>>,
    pub remote: Option<(u64, u32)>,
    pub atomic: Option<(u64, u64)>,
    pub av: Option<DatagramSeg>,
    pub imm: u32,
    pub signaled: bool,
    pub solicited: bool,
}

impl Wr {
    pub(crate) fn new(opcode: u8) -> Wr {
        Wr {
            opcode,
            signaled: true,
            ..Wr::default()
        }
    }

    pub(crate) fn sge(mut self, mr: &Mr, off: u64, len: u32) -> Wr {
        self.sges.push((mr.addr + off, len, mr.key));
        self
    }

    pub(crate) fn remote(mut self, mr: &Mr, off: u64) -> Wr {
        self.remote = Some((mr.addr + off, mr.key));
        self
    }

    pub(crate) fn unsignaled(mut self) -> Wr {
        self.signaled = false;
        self
    }

    /// The WQE bytes at SQ index `idx` (a multiple of 64 bytes).
    pub(crate) fn bytes(&self, qpn: u32, idx: u16) -> Vec<u8> {
        let mut segs = Vec::new();
        if let Some(av) = &self.av {
            segs.extend_from_slice(&av.to_bytes());
        }
        if let Some((raddr, rkey)) = self.remote {
            segs.extend_from_slice(
                &RaddrSeg {
                    raddr: Be64::new(raddr),
                    rkey: Be32::new(rkey),
                    rsvd: Be32::new(0),
                }
                .to_bytes(),
            );
        }
        if let Some((swap_add, compare)) = self.atomic {
            segs.extend_from_slice(
                &AtomicSeg {
                    swap_add: Be64::new(swap_add),
                    compare: Be64::new(compare),
                }
                .to_bytes(),
            );
        }
        if let Some(d) = &self.inline {
            let hdr = InlineHdr {
                byte_count: Be32::new(d.len() as u32 | wqe::INLINE_SEG),
            };
            let start = segs.len();
            segs.extend_from_slice(&hdr.to_bytes());
            segs.extend_from_slice(d);
            let used = segs.len() - start;
            segs.resize(start + used.div_ceil(16) * 16, 0);
        }
        for (addr, len, lkey) in &self.sges {
            segs.extend_from_slice(
                &DataSeg {
                    byte_count: Be32::new(*len),
                    lkey: Be32::new(*lkey),
                    addr: Be64::new(*addr),
                }
                .to_bytes(),
            );
        }
        let ds = 1 + segs.len() / 16;
        let ctrl = CtrlSeg {
            opmod_idx_opcode: Be32::new(u32::from(idx) << 8 | u32::from(self.opcode)),
            qpn_ds: Be32::new(qpn << 8 | ds as u32),
            signature: 0,
            rsvd: [0; 2],
            fm_ce_se: if self.signaled { wqe::CE_CQ_UPDATE } else { 0 }
                | if self.solicited { wqe::SOLICITED } else { 0 },
            imm: Be32::new(self.imm),
        };
        let mut b = ctrl.to_bytes().to_vec();
        b.extend_from_slice(&segs);
        b.resize(b.len().div_ceil(64) * 64, 0);
        b
    }
}

/// Connection parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conn {
    pub mtu: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub timeout: u32,
    pub retry: u32,
    pub rnr_retry: u32,
    pub min_rnr: u32,
    pub rre: bool,
    pub rwe: bool,
    pub rae: bool,
    pub log_sra: u32,
    pub log_rra: u32,
}

impl Default for Conn {
    fn default() -> Conn {
        Conn {
            mtu: qpc::MTU_1024,
            sq_psn: 0x10,
            rq_psn: 0x10,
            timeout: 14,
            retry: 7,
            rnr_retry: 7,
            min_rnr: 1,
            rre: true,
            rwe: true,
            rae: true,
            log_sra: 2,
            log_rra: 2,
        }
    }
}

/// An emulated host: a device brought up to INIT_HCA with RoCE on, GID 0 set, a UAR, an
/// async EQ (CQ errors and QP events), a completion EQ and a PD.
pub(crate) struct Node {
    pub h: H,
    pub ip: Ipv4Addr,
    pub uar: u32,
    pub aeq: (u32, u64, u32),
    pub ceq: (u32, u64, u32),
    pub pd: u32,
    pub key_variant: u8,
}

pub(crate) const ASYNC_EVENTS: &[u8] = &[
    event::CQ_ERROR,
    event::WQ_CATAS_ERROR,
    event::WQ_INVAL_REQ_ERROR,
    event::WQ_ACCESS_ERROR,
    event::COMM_EST,
];

/// The profile of the tests: the defaults.
pub(crate) fn profile() -> Profile {
    crate::connectx::tests::quiet()
}

impl Node {
    pub(crate) fn new(ip: [u8; 4]) -> Node {
        Node::with(ip, profile())
    }

    pub(crate) fn with(ip: [u8; 4], prof: Profile) -> Node {
        Node::with_atomic_mode(ip, prof, None)
    }

    /// [`Node::with`], the atomic response mode set at bring-up when given.
    pub(crate) fn with_atomic_mode(ip: [u8; 4], prof: Profile, atomic_mode: Option<u32>) -> Node {
        let mut h = H::with(prof);
        h.init_with(atomic_mode);
        set_gid(&mut h, 0, &gid_entry(ip)).expect(0, 0);
        let uar = h.alloc_uar();
        let mask = ASYNC_EVENTS.iter().fold(0, |m, e| m | event::mask(*e));
        let (aeq, apas) = h.create_eq(uar, 6, mask);
        let (ceq, cpas) = h.create_eq(uar, 6, 0);
        let pd = h.alloc_pd();
        Node {
            h,
            ip: Ipv4Addr::from(ip),
            uar,
            aeq: (aeq, apas[0], 0),
            ceq: (ceq, cpas[0], 0),
            pd,
            key_variant: 0x10,
        }
    }

    /// Gives the device a clock the test moves by hand.
    pub(crate) fn manual_clock(&mut self) -> Arc<AtomicU64> {
        let t = Arc::new(AtomicU64::new(1_000));
        let c = t.clone();
        self.h
            .dev
            .set_clock(Arc::new(move || c.load(Ordering::SeqCst)));
        t
    }

    pub(crate) fn cq(&mut self, log: u32) -> TCq {
        let pas = self.h.queue_buf(64 << log, cqe::OP_OWN_INIT);
        let dbr = self.h.dbr();
        let m = H::create_cq_msg(self.uar, self.ceq.0, log, dbr, &pas);
        let o = self.h.ok(&m, 16);
        TCq {
            cqn: cmds::create_cq_out::CQN.get(&o),
            base: pas[0],
            dbr,
            log,
            ci: 0,
        }
    }

    /// A PA-mode MR over `len` fresh bytes with `access`.
    pub(crate) fn mr(&mut self, len: u64, access: u8) -> Mr {
        let addr = self.h.mem.alloc(len.max(64).div_ceil(4096) * 4096, 4096);
        let pd = self.pd;
        self.mr_at(addr, len, access, pd)
    }

    pub(crate) fn mr_at(&mut self, addr: u64, len: u64, access: u8, pd: u32) -> Mr {
        self.mr_with(addr, len, access, pd, false)
    }

    /// A PA-mode MR over `len` fresh bytes with `access` that a SEND with invalidate may
    /// invalidate (mkc `en_rinval`).
    pub(crate) fn mr_rinval(&mut self, len: u64, access: u8, pd: u32) -> Mr {
        let addr = self.h.mem.alloc(len.max(64).div_ceil(4096) * 4096, 4096);
        self.mr_with(addr, len, access, pd, true)
    }

    /// [`mr_at`](Self::mr_at), with `en_rinval` set when `rinval`.
    pub(crate) fn mr_with(&mut self, addr: u64, len: u64, access: u8, pd: u32, rinval: bool) -> Mr {
        self.key_variant = self.key_variant.wrapping_add(1);
        let v = self.key_variant;
        let mut m = msg(op::CREATE_MKEY, 0, 0x110);
        let c = cmds::create_mkey_in::MEMORY_KEY_MKEY_ENTRY.byte_off();
        set(&mut m, mkc::ACCESS_MODE_1_0.at(c), mkc::ACCESS_MODE_PA);
        m[c + 2] |= access;
        set(&mut m, mkc::QPN.at(c), mkc::QPN_NONE);
        set(&mut m, mkc::MKEY_7_0.at(c), u32::from(v));
        set(&mut m, mkc::PD.at(c), pd);
        set64(&mut m, mkc::START_ADDR.at(c), addr);
        set64(&mut m, mkc::LEN.at(c), len);
        set(&mut m, mkc::EN_RINVAL.at(c), u32::from(rinval));
        let o = self.h.ok(&m, 16);
        let idx = cmds::create_mkey_out::MKEY_INDEX.get(&o);
        Mr {
            addr,
            len,
            key: idx << 8 | u32::from(v),
        }
    }

    /// An MTT-mode MR at virtual address `va` over the given 4 KiB pages.
    pub(crate) fn mr_mtt(&mut self, va: u64, len: u64, pages: &[u64], access: u8) -> Mr {
        self.key_variant = self.key_variant.wrapping_add(1);
        let v = self.key_variant;
        let oct = pages.len().div_ceil(2);
        let mut m = msg(op::CREATE_MKEY, 0, 0x110 + 16 * oct);
        let c = cmds::create_mkey_in::MEMORY_KEY_MKEY_ENTRY.byte_off();
        set(&mut m, mkc::ACCESS_MODE_1_0.at(c), mkc::ACCESS_MODE_MTT);
        m[c + 2] |= access;
        set(&mut m, mkc::QPN.at(c), mkc::QPN_NONE);
        set(&mut m, mkc::MKEY_7_0.at(c), u32::from(v));
        set(&mut m, mkc::PD.at(c), self.pd);
        set64(&mut m, mkc::START_ADDR.at(c), va);
        set64(&mut m, mkc::LEN.at(c), len);
        set(&mut m, mkc::LOG_PAGE_SIZE.at(c), 12);
        set(&mut m, mkc::TRANSLATIONS_OCTWORD_SIZE.at(c), oct as u32);
        set(
            &mut m,
            cmds::create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
            oct as u32,
        );
        for (i, pa) in pages.iter().enumerate() {
            m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&pa.to_be_bytes());
        }
        let o = self.h.ok(&m, 16);
        let idx = cmds::create_mkey_out::MKEY_INDEX.get(&o);
        Mr {
            addr: va,
            len,
            key: idx << 8 | u32::from(v),
        }
    }

    /// A QP of service type `st`: SQ of 2^`log_sq` WQEBBs, RQ of 2^`log_rq` WQEs of
    /// 16 << `log_stride` bytes (`None`: no RQ).
    pub(crate) fn qp(
        &mut self,
        st: u32,
        scq: &TCq,
        rcq: &TCq,
        log_sq: u32,
        rq: Option<(u32, u32)>,
    ) -> TQp {
        let (rq_n, rq_stride) = rq.map_or((0, 0), |(l, s)| (1u32 << l, 16u64 << s));
        let rq_bytes = u64::from(rq_n) * rq_stride;
        let bytes = rq_bytes + (64u64 << log_sq);
        let pages = bytes.div_ceil(4096);
        let base = self.h.mem.alloc(pages * 4096, 4096);
        let pas: Vec<u64> = (0..pages).map(|i| base + i * 4096).collect();
        let dbr = self.h.dbr();
        let mut m = msg(op::CREATE_QP, 0, 0x110 + 8 * pas.len());
        set(&mut m, q(qpc::ST), st);
        set(&mut m, q(qpc::PM_STATE), qpc::PM_STATE_MIGRATED);
        set(&mut m, q(qpc::PD), self.pd);
        set(&mut m, q(qpc::UAR_PAGE), self.uar);
        match rq {
            Some((l, s)) => {
                set(&mut m, q(qpc::LOG_RQ_SIZE), l);
                set(&mut m, q(qpc::LOG_RQ_STRIDE), s);
                set(&mut m, q(qpc::CQN_RCV), rcq.cqn);
            }
            None => set(&mut m, q(qpc::RQ_TYPE), qpc::RQ_TYPE_ZERO),
        }
        set(&mut m, q(qpc::LOG_SQ_SIZE), log_sq);
        set(&mut m, q(qpc::CQN_SND), scq.cqn);
        set(&mut m, q(qpc::USER_INDEX), 0x77);
        set64(&mut m, q(qpc::DBR_ADDR), dbr);
        for (i, a) in pas.iter().enumerate() {
            m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&a.to_be_bytes());
        }
        let o = self.h.ok(&m, 16);
        TQp {
            qpn: cmds::create_qp_out::QPN.get(&o),
            base,
            rq_bytes,
            rq_n,
            rq_stride,
            sq_bbs: 1 << log_sq,
            dbr,
            sq_pi: 0,
            rq_pi: 0,
            bf_off: 0,
        }
    }

    fn modify(&mut self, opcode: u16, qpn: u32, f: impl FnOnce(&mut Vec<u8>)) {
        let mut m = msg(opcode, 0, 272);
        set(&mut m, cmds::rst2init_qp_in::QPN, qpn);
        f(&mut m);
        self.h.ok(&m, 16);
    }

    /// RST → INIT → RTR → RTS for an RC QP talking to `remote_qpn` at `remote`.
    pub(crate) fn connect(&mut self, qp: &TQp, remote_qpn: u32, remote: Ipv4Addr, c: Conn) {
        self.rst2init_rc(qp, c);
        self.init2rtr_rc(qp, remote_qpn, remote, c);
        self.rtr2rts(qp, c);
    }

    pub(crate) fn rst2init_rc(&mut self, qp: &TQp, c: Conn) {
        self.modify(op::RST2INIT_QP, qp.qpn, |m| {
            set(m, p(ads::VHCA_PORT_NUM), 1);
            set(m, q(qpc::PM_STATE), qpc::PM_STATE_MIGRATED);
            set(m, q(qpc::RRE), u32::from(c.rre));
            set(m, q(qpc::RWE), u32::from(c.rwe));
            set(m, q(qpc::RAE), u32::from(c.rae));
        });
    }

    pub(crate) fn init2rtr_rc(&mut self, qp: &TQp, remote_qpn: u32, remote: Ipv4Addr, c: Conn) {
        self.modify(op::INIT2RTR_QP, qp.qpn, |m| {
            set(m, q(qpc::MTU), c.mtu);
            set(m, q(qpc::LOG_MSG_MAX), 30);
            set(m, q(qpc::REMOTE_QPN), remote_qpn);
            set(m, q(qpc::NEXT_RCV_PSN), c.rq_psn);
            set(m, q(qpc::MIN_RNR_NAK), c.min_rnr);
            set(m, q(qpc::LOG_RRA_MAX), c.log_rra);
            set(m, p(ads::VHCA_PORT_NUM), 1);
            set(m, p(ads::SRC_ADDR_INDEX), 0);
            set(m, p(ads::HOP_LIMIT), 64);
            let g = p(ads::RGID_RIP).slice_mut(m).unwrap();
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&remote.octets());
            p(ads::RMAC)
                .slice_mut(m)
                .unwrap()
                .copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        });
    }

    pub(crate) fn rtr2rts(&mut self, qp: &TQp, c: Conn) {
        self.modify(op::RTR2RTS_QP, qp.qpn, |m| {
            set(m, q(qpc::NEXT_SEND_PSN), c.sq_psn);
            set(m, q(qpc::RETRY_COUNT), c.retry);
            set(m, q(qpc::RNR_RETRY), c.rnr_retry);
            set(m, q(qpc::LOG_SRA_MAX), c.log_sra);
            set(m, p(ads::ACK_TIMEOUT), c.timeout);
        });
    }

    /// RST → INIT → RTR → RTS for a UD (or QP1) QP with Q_Key `qkey`, the path MTU and
    /// message size limit Linux sets (UD: 4096 / 2^12; QP1: 256 / 2^8).
    pub(crate) fn ud_up(&mut self, qp: &TQp, qkey: u32) {
        let (mtu, log_msg) = if qp.qpn == crate::connectx::objects::QP1 {
            (qpc::MTU_256, 8)
        } else {
            (qpc::MTU_4096, 12)
        };
        self.ud_up_with(qp, qkey, mtu, log_msg);
    }

    /// [`ud_up`](Self::ud_up) with the given INIT2RTR `mtu` code and `log_msg_max`.
    pub(crate) fn ud_up_with(&mut self, qp: &TQp, qkey: u32, mtu: u32, log_msg_max: u32) {
        self.modify(op::RST2INIT_QP, qp.qpn, |m| {
            set(m, p(ads::VHCA_PORT_NUM), 1);
            set(m, q(qpc::PM_STATE), qpc::PM_STATE_MIGRATED);
            q(qpc::Q_KEY)
                .slice_mut(m)
                .unwrap()
                .copy_from_slice(&qkey.to_be_bytes());
        });
        self.modify(op::INIT2RTR_QP, qp.qpn, |m| {
            set(m, q(qpc::MTU), mtu);
            set(m, q(qpc::LOG_MSG_MAX), log_msg_max);
        });
        self.modify(op::RTR2RTS_QP, qp.qpn, |m| {
            set(m, q(qpc::NEXT_SEND_PSN), 0x100);
        });
    }

    pub(crate) fn modify_to_err(&mut self, qp: &TQp) {
        self.modify(op::QP_2ERR, qp.qpn, |_| {});
    }

    /// Writes a WQE into the SQ and updates the doorbell record, without a doorbell.
    pub(crate) fn write_send(&mut self, qp: &mut TQp, wr: &Wr) -> (u16, Vec<u8>) {
        let idx = qp.sq_pi;
        let b = wr.bytes(qp.qpn, idx);
        for (k, bb) in b.chunks(64).enumerate() {
            let slot = (u32::from(idx) + k as u32) & (qp.sq_bbs - 1);
            self.h
                .mem
                .wr(qp.base + qp.rq_bytes + u64::from(slot) * 64, bb);
        }
        qp.sq_pi = qp.sq_pi.wrapping_add((b.len() / 64) as u16);
        self.h
            .mem
            .wr(qp.dbr + 4, &u32::from(qp.sq_pi).to_be_bytes());
        (idx, b)
    }

    /// Rings the send doorbell with the first 8 bytes of a control segment.
    pub(crate) fn ring(&mut self, qp: &mut TQp, ctrl8: &[u8]) {
        let off = self.uar as usize * 4096 + wqe_bf(qp);
        self.h.dev.mmio_write(off, &ctrl8[..8]);
    }

    /// Posts one send WQE (record + doorbell); returns its index.
    pub(crate) fn post_send(&mut self, qp: &mut TQp, wr: &Wr) -> u16 {
        let (idx, b) = self.write_send(qp, wr);
        self.ring(qp, &b[..8]);
        idx
    }

    /// Writes a receive WQE and updates the record (no doorbell: there is none for RQs).
    pub(crate) fn post_recv(&mut self, qp: &mut TQp, sges: &[(u64, u32, u32)]) {
        let slot = u32::from(qp.rq_pi) & (qp.rq_n - 1);
        let mut b = vec![0u8; qp.rq_stride as usize];
        let max = b.len() / 16;
        for (i, (addr, len, lkey)) in sges.iter().enumerate().take(max) {
            let d = DataSeg {
                byte_count: Be32::new(*len),
                lkey: Be32::new(*lkey),
                addr: Be64::new(*addr),
            };
            b[16 * i..16 * i + 16].copy_from_slice(&d.to_bytes());
        }
        if sges.len() < max {
            let t = DataSeg {
                byte_count: Be32::new(0),
                lkey: Be32::new(wqe::INVALID_LKEY),
                addr: Be64::new(0),
            };
            b[16 * sges.len()..16 * sges.len() + 16].copy_from_slice(&t.to_bytes());
        }
        self.h.mem.wr(qp.base + u64::from(slot) * qp.rq_stride, &b);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        self.h.mem.wr(qp.dbr, &u32::from(qp.rq_pi).to_be_bytes());
    }

    pub(crate) fn recv(&mut self, qp: &mut TQp, mr: &Mr, off: u64, len: u32) {
        self.post_recv(qp, &[(mr.addr + off, len, mr.key)]);
    }

    /// The next CQE if the device wrote one (owner rule), consuming it.
    pub(crate) fn poll_cq(&mut self, cq: &mut TCq) -> Option<Cqe> {
        let n = 1u32 << cq.log;
        let slot = u64::from(cq.ci & (n - 1));
        let raw = self.h.mem.rd(cq.base + slot * 64, 64);
        let b: [u8; 64] = raw.try_into().unwrap();
        let op_own = b[63];
        if cqe::opcode_of(op_own) == cqe::opcode::INVALID
            || u32::from(op_own & 1) != (cq.ci >> cq.log) & 1
        {
            return None;
        }
        cq.ci = cq.ci.wrapping_add(1);
        self.h.mem.wr(cq.dbr, &(cq.ci & 0xff_ffff).to_be_bytes());
        Some(Cqe::parse(&b))
    }

    /// The next CQE, polling the device until it comes (bounded).
    #[track_caller]
    pub(crate) fn cqe(&mut self, cq: &mut TCq) -> Cqe {
        for _ in 0..1000 {
            if let Some(c) = self.poll_cq(cq) {
                return c;
            }
            self.h.dev.poll();
        }
        panic!("no CQE on CQ {}", cq.cqn);
    }

    /// Arms a CQ: record word 1, then the UAR doorbell.
    pub(crate) fn arm(&mut self, cq: &TCq, sn: u32, solicited: bool) {
        let word = (sn & 3) << 28 | if solicited { 1 << 24 } else { 0 } | (cq.ci & 0xff_ffff);
        self.h.mem.wr(cq.dbr + 4, &word.to_be_bytes());
        let mut v = word.to_be_bytes().to_vec();
        v.extend_from_slice(&cq.cqn.to_be_bytes());
        let off = self.uar as usize * 4096 + 0x20;
        self.h.dev.mmio_write(off, &v);
    }

    /// New EQEs on an EQ: `(type, data)`; updates the EQ consumer index.
    pub(crate) fn eqes(&mut self, async_eq: bool) -> Vec<(u8, [u8; 28])> {
        let uar = self.uar;
        let (eqn, base, ci) = if async_eq { self.aeq } else { self.ceq };
        let mut ci = ci;
        let mut out = Vec::new();
        loop {
            let slot = u64::from(ci & 63);
            let b = self.h.mem.rd(base + slot * 64, 64);
            if u32::from(b[eqe::OWNER] & 1) != (ci >> 6) & 1 {
                break;
            }
            let mut d = [0u8; 28];
            d.copy_from_slice(&b[eqe::DATA..eqe::DATA + 28]);
            out.push((b[eqe::TYPE], d));
            ci += 1;
        }
        self.h.eq_db(uar, eqn, ci, false);
        if async_eq {
            self.aeq.2 = ci;
        } else {
            self.ceq.2 = ci;
        }
        out
    }
}

/// The BlueFlame register buffer to use next (alternating halves, 512-byte registers).
fn wqe_bf(qp: &mut TQp) -> usize {
    let off = firmware_interface::uar::BF_OFFSET + qp.bf_off;
    qp.bf_off ^= 256;
    off
}

/// A BE32 at `at` in EQE data.
pub(crate) fn data32(d: &[u8; 28], eqe_off: usize) -> u32 {
    let at = eqe_off - eqe::DATA;
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// Deterministic test bytes.
pub(crate) fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A UD address vector for `dqpn` at `dst`.
pub(crate) fn av(dqpn: u32, qkey: u32, dst: Ipv4Addr) -> DatagramSeg {
    let mut rgid = [0u8; 16];
    rgid[10] = 0xff;
    rgid[11] = 0xff;
    rgid[12..].copy_from_slice(&dst.octets());
    DatagramSeg {
        qkey: Be32::new(qkey),
        rsvd0: Be32::new(0),
        dqp_dct: Be32::new(wqe::EXTENDED_UD_AV | dqpn),
        stat_rate_sl: 0,
        fl_mlid: 0,
        rlid: Be16::new(0xc000),
        rsvd1: [0; 4],
        rmac: [2, 0, 0, 0, 0, 2],
        tclass: 0,
        hop_limit: 64,
        grh_gid_fl: Be32::new(0),
        rgid,
    }
}

/// Send opcode helpers for readability.
pub(crate) use wop::{
    ATOMIC_CS, ATOMIC_FA, NOP, RDMA_READ, RDMA_WRITE, RDMA_WRITE_IMM, SEND, SEND_IMM, SEND_INVAL,
};
