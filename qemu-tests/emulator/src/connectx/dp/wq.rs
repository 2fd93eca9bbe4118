//! Work queue rings (`docs/mlx5.md#doorbell-records`, `docs/mlx5.md#work-queue-entries`): the QP
//! buffer (RQ first, SQ after it), doorbell records, and parsing of send and receive WQEs. Nothing
//! here trusts the driver: every field is checked, every read is bounded by the ring.

use firmware_interface::ctx::qpc as q;
use firmware_interface::uar::dbr;
use firmware_interface::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, opcode as wop,
};

use super::mkey::{KeyError, Sgl, access};
use crate::connectx::objects::Qp;
use crate::{Device, DeviceError, WqeFault};

use firmware_interface::cqe::syndrome as cs;

/// A parsed data segment or inline block.
enum Seg {
    Data { len: u32, lkey: u32, addr: u64 },
    Inline(Vec<u8>),
}

/// What the WQE asks the remote side for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Remote {
    pub raddr: u64,
    pub rkey: u32,
}

/// The address vector of a UD send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UdDest {
    pub dqpn: u32,
    pub qkey: u32,
    pub sgid: usize,
    pub rgid: [u8; 16],
    pub sport: u16,
    pub tclass: u8,
    pub hop_limit: u8,
}

/// Local data of a send WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Local {
    /// Translated scatter/gather list (gather for SEND/WRITE, scatter for READ/atomics).
    Sgl(Sgl),
    /// Inline data copied out of the WQE.
    Inline(Vec<u8>),
}

/// A send WQE as fetched from the SQ.
#[derive(Clone, Debug)]
pub(crate) struct SendWqe {
    /// WQE index (`wqe_counter` of its CQE).
    pub idx: u16,
    /// mlx5 send opcode.
    pub opcode: u8,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    /// Immediate data as it sits in the WQE (network order value).
    pub imm: u32,
    /// Message length.
    pub len: u64,
    pub local: Local,
    pub remote: Option<Remote>,
    /// `(swap_add, compare)`.
    pub atomic: Option<(u64, u64)>,
    pub ud: Option<UdDest>,
    /// Set when the WQE completes in error (a local error found at fetch, or a transport
    /// error): the error CQE's syndrome.
    pub err: Option<u8>,
    // --- transport progress
    /// Packets (READ: response packets) of the message.
    pub npkts: u32,
    /// PSN of the first packet, once assigned.
    pub first_psn: Option<u32>,
    /// READ: response packets received.
    pub rcvd: u32,
    /// READ: the response packet the current request started at (a retried READ asks for
    /// the rest of the data only; its responses are numbered from FIRST again).
    pub rd_base: u32,
    /// Acknowledged / answered / sent (unreliable): ready to complete.
    pub done: bool,
}

impl SendWqe {
    /// Whether the WQE is an RDMA READ or an atomic (answered with data).
    pub(crate) fn is_rd_atomic(&self) -> bool {
        matches!(
            self.opcode,
            wop::RDMA_READ | wop::ATOMIC_CS | wop::ATOMIC_FA
        )
    }

    /// Last PSN of the message (`first + npkts - 1`), once started.
    pub(crate) fn last_psn(&self) -> Option<u32> {
        self.first_psn
            .map(|f| roce_wire::transport::psn_add(f, self.npkts.max(1) - 1))
    }
}

/// The outcome of fetching one send WQE.
pub(crate) enum Fetched {
    /// A WQE (possibly carrying a local error) and the WQEBBs it occupies.
    Wqe(SendWqe, u16),
    /// The SQ buffer itself could not be read.
    Catastrophic,
}

/// Bytes of the RQ at the start of the QP buffer.
pub(crate) fn rq_bytes(qp: &Qp) -> u64 {
    qp.rq.map_or(0, |(log, stride)| (16u64 << stride) << log)
}

/// DMA address of byte `off` of the QP buffer.
pub(crate) fn buf_addr(qp: &Qp, off: u64) -> Option<u64> {
    let page = 4096u64 << qp.log_page_size;
    let base = qp.pas.get(usize::try_from(off / page).ok()?)?;
    Some(base + off % page)
}

/// Number of SQ WQEBBs.
pub(crate) fn sq_bbs(qp: &Qp) -> u32 {
    qp.sq.map_or(0, |log| 1u32 << log)
}

/// Number of RQ WQEs and the stride.
pub(crate) fn rq_geometry(qp: &Qp) -> Option<(u32, u64)> {
    qp.rq.map(|(log, stride)| (1u32 << log, 16u64 << stride))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Parses data segments (and inline blocks) from `b`.
fn parse_segs(b: &[u8], allow_inline: bool) -> Result<Vec<Seg>, WqeFault> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 4 <= b.len() {
        let bc = be32(&b[at..]);
        if bc & wqe::INLINE_SEG != 0 {
            if !allow_inline {
                return Err(WqeFault::BadSegments);
            }
            let n = (bc & !wqe::INLINE_SEG) as usize;
            let end = at
                .checked_add(4 + n)
                .filter(|e| *e <= b.len())
                .ok_or(WqeFault::BadSegments)?;
            out.push(Seg::Inline(b[at + 4..end].to_vec()));
            at += (4 + n).div_ceil(16) * 16;
        } else {
            if at + DataSeg::SIZE > b.len() {
                return Err(WqeFault::BadSegments);
            }
            let d = DataSeg::read_from(&b[at..]).ok_or(WqeFault::BadSegments)?;
            out.push(Seg::Data {
                len: d.byte_count.get(),
                lkey: d.lkey.get(),
                addr: d.addr.get(),
            });
            at += DataSeg::SIZE;
        }
    }
    Ok(out)
}

impl Device {
    /// Reads a BE32 doorbell-record word; `None` on a DMA fault (recorded).
    pub(crate) fn read_dbr(&mut self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.dma_read(addr, &mut b).ok()?;
        Some(u32::from_be_bytes(b))
    }

    /// The SQ producer counter (doorbell record word 1, low 16 bits).
    pub(crate) fn sq_producer(&mut self, qpn: u32) -> Option<u16> {
        let a = self.obj.qps.get(qpn)?.dbr_addr + dbr::QP_SND as u64;
        self.read_dbr(a).map(|v| v as u16)
    }

    /// The RQ producer counter (doorbell record word 0, low 16 bits).
    pub(crate) fn rq_producer(&mut self, qpn: u32) -> Option<u16> {
        let a = self.obj.qps.get(qpn)?.dbr_addr + dbr::QP_RCV as u64;
        self.read_dbr(a).map(|v| v as u16)
    }

    /// Reads `n` SQ WQEBBs starting at counter `ci` (wrapping at the end of the ring).
    fn read_sq_bbs(&mut self, qpn: u32, ci: u16, n: u16) -> Option<Vec<u8>> {
        let mut out = vec![0u8; usize::from(n) * wqe::SEND_WQE_BB];
        for k in 0..n {
            let addr = {
                let qp = self.obj.qps.get(qpn)?;
                let nbb = sq_bbs(qp);
                if nbb == 0 {
                    return None;
                }
                let slot = u64::from(u32::from(ci.wrapping_add(k)) & (nbb - 1));
                buf_addr(qp, rq_bytes(qp) + slot * wqe::SEND_WQE_BB as u64)?
            };
            let at = usize::from(k) * wqe::SEND_WQE_BB;
            self.dma_read(addr, &mut out[at..at + wqe::SEND_WQE_BB])
                .ok()?;
        }
        Some(out)
    }

    /// The control segment at SQ counter `ci` and the number of WQEBBs it claims (at least 1,
    /// for walking a ring that holds garbage).
    pub(crate) fn peek_ctrl(&mut self, qpn: u32, ci: u16) -> Option<(CtrlSeg, u16)> {
        let b = self.read_sq_bbs(qpn, ci, 1)?;
        let c = CtrlSeg::read_from(&b)?;
        let ds = c.qpn_ds.get() & wqe::DS_MASK;
        let bbs = (ds as usize * wqe::SEND_WQE_DS)
            .div_ceil(wqe::SEND_WQE_BB)
            .clamp(1, wqe::MAX_WQEBBS) as u16;
        Some((c, bbs))
    }

    /// Fetches and validates the send WQE at SQ counter `ci`.
    pub(crate) fn fetch_send_wqe(&mut self, qpn: u32, ci: u16) -> Fetched {
        let Some((ctrl, _)) = self.peek_ctrl(qpn, ci) else {
            return Fetched::Catastrophic;
        };
        let Some(qp) = self.obj.qps.get(qpn) else {
            return Fetched::Catastrophic;
        };
        let st = qp.st;
        let pd = qp.pd;
        let nbb = sq_bbs(qp);
        let log_msg_max = match q::LOG_MSG_MAX.get(&qp.qpc) {
            0 => u32::from(self.profile.log_max_msg),
            v => v,
        };
        let max_wqe = usize::from(self.profile.max_wqe_sz_sq)
            .min(wqe::MAX_WQEBBS * wqe::SEND_WQE_BB)
            .min(nbb as usize * wqe::SEND_WQE_BB);
        let oio = ctrl.opmod_idx_opcode.get();
        let opcode = (oio & wqe::OPCODE_MASK) as u8;
        let idx = ((oio >> wqe::WQE_IDX_SHIFT) & wqe::WQE_IDX_MASK) as u16;
        let qpn_ds = ctrl.qpn_ds.get();
        let ds = (qpn_ds & wqe::DS_MASK) as usize;
        let fm_ce_se = ctrl.fm_ce_se;
        let mut w = SendWqe {
            idx: ci,
            opcode,
            signaled: fm_ce_se & wqe::CE_MASK >= wqe::CE_CQ_UPDATE,
            solicited: fm_ce_se & wqe::SOLICITED != 0,
            fence: fm_ce_se & wqe::FENCE_MASK != 0,
            imm: ctrl.imm.get(),
            len: 0,
            local: Local::Sgl(Sgl::default()),
            remote: None,
            atomic: None,
            ud: None,
            err: None,
            npkts: 1,
            first_psn: None,
            rcvd: 0,
            rd_base: 0,
            done: false,
        };
        let fault = |d: &mut Device, w: &mut SendWqe, f: WqeFault, bbs: u16| {
            d.error(DeviceError::BadWqe {
                qpn,
                wqe_counter: ci,
                fault: f,
            });
            w.err = Some(match f {
                WqeFault::TooLong(_) => cs::LOCAL_LENGTH_ERR,
                _ => cs::LOCAL_QP_OP_ERR,
            });
            Fetched::Wqe(w.clone(), bbs)
        };
        if idx != ci {
            return fault(
                self,
                &mut w,
                WqeFault::BadIndex {
                    expected: ci,
                    found: idx,
                },
                1,
            );
        }
        if ds == 0 || ds * wqe::SEND_WQE_DS > max_wqe {
            return fault(self, &mut w, WqeFault::BadDs(ds as u8), 1);
        }
        let bbs = (ds * wqe::SEND_WQE_DS).div_ceil(wqe::SEND_WQE_BB) as u16;
        if qpn_ds >> wqe::QPN_SHIFT != qpn {
            return fault(
                self,
                &mut w,
                WqeFault::QpnMismatch(qpn_ds >> wqe::QPN_SHIFT),
                bbs,
            );
        }
        let datagram = st == q::ST_UD || st == q::ST_QP1;
        let legal = match opcode {
            wop::NOP | wop::SEND | wop::SEND_IMM => true,
            // SEND with invalidate exists on RC only (no UC/UD opcode carries an IETH).
            wop::SEND_INVAL => st == q::ST_RC,
            wop::RDMA_WRITE | wop::RDMA_WRITE_IMM => st == q::ST_RC || st == q::ST_UC,
            wop::RDMA_READ | wop::ATOMIC_CS | wop::ATOMIC_FA => st == q::ST_RC,
            _ => false,
        };
        if !legal {
            return fault(self, &mut w, WqeFault::BadOpcode(opcode), bbs);
        }
        let Some(raw) = self.read_sq_bbs(qpn, ci, bbs) else {
            return Fetched::Catastrophic;
        };
        let b = &raw[..ds * wqe::SEND_WQE_DS];
        let mut at = CtrlSeg::SIZE;
        if opcode == wop::NOP {
            return Fetched::Wqe(w, bbs);
        }
        if datagram {
            let Some(av) = b.get(at..).and_then(DatagramSeg::read_from) else {
                return fault(self, &mut w, WqeFault::BadSegments, bbs);
            };
            let gfl = av.grh_gid_fl.get();
            w.ud = Some(UdDest {
                dqpn: av.dqp_dct.get() & 0x00ff_ffff,
                qkey: av.qkey.get(),
                sgid: ((gfl >> wqe::AV_SGID_INDEX_SHIFT) & 0xff) as usize,
                rgid: av.rgid,
                sport: av.rlid.get(),
                tclass: av.tclass,
                hop_limit: av.hop_limit,
            });
            at += DatagramSeg::SIZE;
        }
        let rdma = matches!(
            opcode,
            wop::RDMA_WRITE
                | wop::RDMA_WRITE_IMM
                | wop::RDMA_READ
                | wop::ATOMIC_CS
                | wop::ATOMIC_FA
        );
        if rdma {
            let Some(r) = b.get(at..).and_then(RaddrSeg::read_from) else {
                return fault(self, &mut w, WqeFault::BadSegments, bbs);
            };
            w.remote = Some(Remote {
                raddr: r.raddr.get(),
                rkey: r.rkey.get(),
            });
            at += RaddrSeg::SIZE;
        }
        let atomic = matches!(opcode, wop::ATOMIC_CS | wop::ATOMIC_FA);
        if atomic {
            let Some(a) = b.get(at..).and_then(AtomicSeg::read_from) else {
                return fault(self, &mut w, WqeFault::BadSegments, bbs);
            };
            w.atomic = Some((a.swap_add.get(), a.compare.get()));
            at += AtomicSeg::SIZE;
        }
        let gather = matches!(
            opcode,
            wop::SEND | wop::SEND_IMM | wop::SEND_INVAL | wop::RDMA_WRITE | wop::RDMA_WRITE_IMM
        );
        let segs = match parse_segs(b.get(at..).unwrap_or(&[]), gather) {
            Ok(s) => s,
            Err(f) => return fault(self, &mut w, f, bbs),
        };
        let mut inline = Vec::new();
        let mut sgl = Sgl::default();
        let mut saw_inline = false;
        let mut saw_data = false;
        let need = if gather { access::LR } else { access::LW };
        let mut key_err = None;
        // The message length is what the data segments say, whether or not their keys
        // check out (a bad key is a protection error, not a length error).
        let mut declared = 0u64;
        for s in segs {
            match s {
                Seg::Inline(d) => {
                    saw_inline = true;
                    inline.extend_from_slice(&d);
                }
                Seg::Data { len, lkey, addr } => {
                    saw_data = true;
                    if len == 0 {
                        continue;
                    }
                    declared += u64::from(len);
                    match self.translate(lkey, pd, addr, u64::from(len), need) {
                        Ok(s) => sgl.extend(s),
                        Err(e) => {
                            key_err.get_or_insert(e);
                        }
                    }
                }
            }
        }
        if saw_inline && saw_data {
            return fault(self, &mut w, WqeFault::BadSegments, bbs);
        }
        w.len = if saw_inline {
            inline.len() as u64
        } else {
            declared
        };
        if atomic && w.len != 8 {
            w.err = Some(cs::LOCAL_LENGTH_ERR);
            return Fetched::Wqe(w, bbs);
        }
        if log_msg_max < 64 && w.len > 1u64 << log_msg_max || w.len > u64::from(u32::MAX) {
            let len = w.len;
            return fault(self, &mut w, WqeFault::TooLong(len), bbs);
        }
        if let Some(e) = key_err {
            w.err = Some(key_syndrome(e));
            return Fetched::Wqe(w, bbs);
        }
        w.local = if saw_inline {
            Local::Inline(inline)
        } else {
            Local::Sgl(sgl)
        };
        Fetched::Wqe(w, bbs)
    }

    /// Reads the receive WQE at RQ counter `ci` and translates its scatter list for `pd`.
    /// `Err(None)`: the RQ buffer could not be read; `Err(Some(syndrome))`: a bad key.
    pub(crate) fn fetch_recv_wqe(&mut self, qpn: u32, ci: u16) -> Result<Sgl, Option<u8>> {
        let (addr, stride, pd) = {
            let qp = self.obj.qps.get(qpn).ok_or(None)?;
            let (n, stride) = rq_geometry(qp).ok_or(None)?;
            let slot = u64::from(u32::from(ci) & (n - 1));
            (buf_addr(qp, slot * stride).ok_or(None)?, stride, qp.pd)
        };
        // A stride is at most max_wqe_sz_rq; it never crosses a PAS page (4 KiB multiples).
        let mut b = vec![0u8; stride as usize];
        self.dma_read(addr, &mut b).map_err(|_| None)?;
        let mut sgl = Sgl::default();
        for seg in b.chunks_exact(DataSeg::SIZE) {
            let Some(d) = DataSeg::read_from(seg) else {
                break;
            };
            let (len, lkey, addr) = (d.byte_count.get(), d.lkey.get(), d.addr.get());
            if lkey == wqe::INVALID_LKEY {
                break;
            }
            if len == 0 {
                continue;
            }
            let s = self
                .translate(lkey, pd, addr, u64::from(len), access::LW)
                .map_err(|e| Some(key_syndrome(e)))?;
            sgl.extend(s);
        }
        Ok(sgl)
    }
}

/// The local error syndrome for a failed key check.
pub(crate) fn key_syndrome(_e: KeyError) -> u8 {
    cs::LOCAL_PROT_ERR
}
