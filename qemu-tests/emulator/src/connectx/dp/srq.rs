//! Shared receive queues: taking a receive WQE from the SRQ a QP is attached to.
//!
//! An SRQ is a ring of WQEs linked by their next segments (`wqe::SrqNextSeg`). The driver
//! posts along the list and counts the WQEs posted in doorbell-record word 0; the device
//! consumes from its own head, following each consumed WQE's `next_wqe_index`, and counts the
//! WQEs consumed. A WQE is taken when a message needs one (the first packet of a SEND, the
//! last of a WRITE with immediate, a UD datagram) and belongs to that message from then on:
//! its index is the QP's (`QpDp::srq_wqe`) until the completion (success, error or flush)
//! names it in `wqe_counter`. Any QP attached to the SRQ takes the next posted WQE.

use firmware_interface::eqe::{self, event};
use firmware_interface::wqe::{self, DataSeg, SrqNextSeg};

use super::mkey::{Sgl, access};
use super::wq::key_syndrome;
use crate::connectx::objects::Srq;
use crate::{Device, DeviceError};

/// Per-SRQ data-path state.
#[derive(Debug, Default)]
pub(crate) struct SrqDp {
    /// Index of the next WQE to consume (the head of the posted list).
    pub head: u16,
    /// WQEs consumed (the doorbell record counts the WQEs posted).
    pub ci: u16,
}

/// Why no receive WQE came from the SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SrqTake {
    /// Nothing posted.
    Empty,
    /// The SRQ ring, its doorbell record or its counters are unusable.
    Fatal,
    /// The WQE was consumed but a key of its scatter list is bad (this syndrome).
    Key(u8),
}

/// DMA address of byte `off` of the SRQ buffer.
fn srq_addr(s: &Srq, off: u64) -> Option<u64> {
    let page = 4096u64 << s.log_page_size;
    let base = s.pas.get(usize::try_from(off / page).ok()?)?;
    Some(base + off % page)
}

impl Device {
    /// The SRQ QP `qpn` receives from, if any.
    pub(crate) fn srq_of(&self, qpn: u32) -> Option<u32> {
        self.obj.qps.get(qpn).and_then(|q| q.srqn)
    }

    /// The receive WQE of the message in progress on QP `qpn` (attached to `srqn`): the one
    /// taken before, or the next posted one, consumed now. With `scatter`, its scatter list
    /// translated for the SRQ's PD.
    pub(crate) fn srq_take(&mut self, qpn: u32, srqn: u32, scatter: bool) -> Result<Sgl, SrqTake> {
        let held = self.obj.qps.get(qpn).ok_or(SrqTake::Fatal)?.dp.srq_wqe;
        let (idx, addr, stride, pd) = {
            let s = self.obj.srqs.get(srqn).ok_or(SrqTake::Fatal)?;
            let n = 1u32 << s.log_size;
            let stride = 16u64 << s.log_stride;
            let idx = match held {
                Some(i) => i,
                None => s.dp.head,
            };
            let slot = u64::from(u32::from(idx) & (n - 1));
            let addr = srq_addr(s, slot * stride).ok_or(SrqTake::Fatal)?;
            (idx, addr, stride, s.pd)
        };
        let mut b = vec![0u8; stride as usize];
        if held.is_none() {
            let (dbr, ci, n) = {
                let s = self.obj.srqs.get(srqn).ok_or(SrqTake::Fatal)?;
                (s.dbr_addr, s.dp.ci, 1u32 << s.log_size)
            };
            let pi = self.read_dbr(dbr).ok_or(SrqTake::Fatal)? as u16;
            if pi == ci {
                return Err(SrqTake::Empty);
            }
            if u32::from(pi.wrapping_sub(ci)) > n {
                self.error(DeviceError::WqOverflow {
                    qpn,
                    sq: false,
                    producer: pi,
                    consumer: ci,
                });
                return Err(SrqTake::Fatal);
            }
            self.dma_read(addr, &mut b).map_err(|_| SrqTake::Fatal)?;
            let next = SrqNextSeg::read_from(&b[..SrqNextSeg::SIZE])
                .ok_or(SrqTake::Fatal)?
                .next_wqe_index
                .get();
            let mut limit = false;
            if let Some(s) = self.obj.srqs.get_mut(srqn) {
                // The ring is a power of two: the next index is taken modulo its size.
                s.dp.head = next & ((1u32 << s.log_size) - 1) as u16;
                s.dp.ci = ci.wrapping_add(1);
                // The limit event fires once, when fewer than `lwm` WQEs stay posted.
                if s.lwm != 0 && pi.wrapping_sub(s.dp.ci) < s.lwm {
                    s.lwm = 0;
                    limit = true;
                }
            }
            if limit {
                self.srq_event(srqn, event::SRQ_RQ_LIMIT);
            }
            if let Some(q) = self.obj.qps.get_mut(qpn) {
                q.dp.srq_wqe = Some(idx);
            }
        } else {
            self.dma_read(addr, &mut b).map_err(|_| SrqTake::Fatal)?;
        }
        let mut sgl = Sgl::default();
        if !scatter {
            return Ok(sgl);
        }
        for seg in b[SrqNextSeg::SIZE..].chunks_exact(DataSeg::SIZE) {
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
                .map_err(|e| SrqTake::Key(key_syndrome(e)))?;
            sgl.extend(s);
        }
        Ok(sgl)
    }

    /// An SRQ event (`qp_srq_n` = the SRQ number) on every EQ subscribed to `ev`.
    fn srq_event(&mut self, srqn: u32, ev: u8) {
        let mut data = [0u8; 28];
        let at = eqe::QP_EVENT_QPN - eqe::DATA;
        data[at..at + 4].copy_from_slice(&(srqn & 0xff_ffff).to_be_bytes());
        for eqn in self.subscribed(ev) {
            self.post_eqe(eqn, ev, 0, &data);
        }
    }

    /// The `wqe_counter` of the receive completion QP `qpn` writes now, and the WQE it
    /// retires: the SRQ WQE its message took, or the RQ WQE at the consumer counter.
    pub(crate) fn take_recv_counter(&mut self, qpn: u32) -> Option<u16> {
        let qp = self.obj.qps.get_mut(qpn)?;
        if qp.srqn.is_some() {
            return qp.dp.srq_wqe.take();
        }
        let ci = qp.dp.rq_ci;
        qp.dp.rq_ci = ci.wrapping_add(1);
        Some(ci)
    }
}
