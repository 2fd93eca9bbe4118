//! The admin command processor (`docs/efa.md#admin-commands`, `docs/efa.md#features`).
//!
//! Every command is checked as strictly as the contract allows; a refusal is an admin status
//! and has no other effect:
//! * unknown opcode → BAD_OPCODE; ALLOC_MR (not offered) → UNSUPPORTED_OPCODE;
//! * a handle naming no object (PD, UAR, EQ, CQ, QP, AH, MR), a size or type out of range,
//!   a flag the device does not offer, an illegal QP transition or a wrong `cur_qp_state`
//!   → ILLEGAL_PARAMETER;
//! * a ring, page list or control buffer the device cannot read, or a control buffer of the
//!   wrong length → MALFORMED_REQUEST;
//! * a table at its limit → RESOURCE_ALLOCATION_FAILURE;
//! * destroying an object something else still uses → RESOURCE_BUSY.
//!
//! Model placement of the queues it hands out: the SQ doorbell of QP number `n` is at
//! `n * 8` of the doorbell BAR and its RQ doorbell at `n * 8 + 4`; the doorbell of CQ `c` at
//! [`CQ_DB_BASE`]` + c * 4`; the LLQ of QP number `n` at `n * max_llq_size` of BAR2.

use firmware_interface::efa::admin::{self, CtrlBuffInfo, status as st};
use firmware_interface::efa::cmds::*;
use firmware_interface::efa::feature::{self, id};
use firmware_interface::efa::io;
use firmware_interface::efa::opcode as op;

use super::objects::{self, Ah, Cq, Eq, Mr, Pd, Qp, Uar};
use super::{Device, DeviceError};

/// Offset of the CQ doorbells in the doorbell BAR.
pub(crate) const CQ_DB_BASE: u32 = 0x1_0000;
/// Largest control buffer (HOST_INFO) the device reads.
const MAX_CTRL_BUFFER: u32 = 4096;

type Resp = [u8; admin::ENTRY_SIZE];
type Res = Result<Resp, u8>;

fn resp() -> Resp {
    [0; admin::ENTRY_SIZE]
}

/// ILLEGAL_PARAMETER unless `ok`.
fn check(ok: bool) -> Result<(), u8> {
    if ok {
        Ok(())
    } else {
        Err(st::ILLEGAL_PARAMETER)
    }
}

impl Device {
    /// Executes one submission entry: `(status, completion bytes)`.
    pub(crate) fn execute(&mut self, c: &[u8; admin::ENTRY_SIZE]) -> (u8, Resp) {
        let opcode = c[2];
        if let Some(f) = self.faults.fail_command
            && f.opcode == opcode
        {
            self.faults.fail_command = match f.times {
                Some(n) if n <= 1 => None,
                Some(n) => Some(super::FailCommand {
                    times: Some(n - 1),
                    ..f
                }),
                None => Some(f),
            };
            return (f.status, resp());
        }
        let r = match opcode {
            op::CREATE_QP => self.create_qp(c),
            op::MODIFY_QP => self.modify_qp(c),
            op::QUERY_QP => self.query_qp(c),
            op::DESTROY_QP => self.destroy_qp(c),
            op::CREATE_AH => self.create_ah(c),
            op::DESTROY_AH => self.destroy_ah(c),
            op::REG_MR => self.reg_mr(c),
            op::DEREG_MR => self.dereg_mr(c),
            op::CREATE_CQ => self.create_cq(c),
            op::DESTROY_CQ => self.destroy_cq(c),
            op::GET_FEATURE => self.get_feature(c),
            op::SET_FEATURE => self.set_feature(c),
            op::GET_STATS => self.get_stats(c),
            op::ALLOC_PD => self.alloc_pd(),
            op::DEALLOC_PD => self.dealloc_pd(c),
            op::ALLOC_UAR => self.alloc_uar(),
            op::DEALLOC_UAR => self.dealloc_uar(c),
            op::CREATE_EQ => self.create_eq(c),
            op::DESTROY_EQ => self.destroy_eq(c),
            op::ALLOC_MR => Err(st::UNSUPPORTED_OPCODE),
            _ => Err(st::BAD_OPCODE),
        };
        match r {
            Ok(out) => (st::SUCCESS, out),
            Err(s) => (s, resp()),
        }
    }

    // ------------------------------------------------------------ PD, UAR

    fn alloc_pd(&mut self) -> Res {
        let pd = objects::free_u16(&self.obj.pds, self.profile.max_pd)
            .ok_or(st::RESOURCE_ALLOCATION_FAILURE)?;
        self.obj.pds.insert(pd, Pd);
        let mut o = resp();
        alloc_pd_resp::PD.set(&mut o, pd.into());
        Ok(o)
    }

    fn dealloc_pd(&mut self, c: &[u8]) -> Res {
        let pd = dealloc_pd_cmd::PD.get(c) as u16;
        check(self.obj.pds.contains_key(&pd))?;
        let o = &self.obj;
        if o.qps.values().any(|q| q.pd == pd)
            || o.ahs.values().any(|a| a.pd == pd)
            || o.mrs.values().any(|m| m.pd == pd)
        {
            return Err(st::RESOURCE_BUSY);
        }
        self.obj.pds.remove(&pd);
        Ok(resp())
    }

    fn alloc_uar(&mut self) -> Res {
        let uar = objects::free_u16(&self.obj.uars, self.profile.max_uar)
            .ok_or(st::RESOURCE_ALLOCATION_FAILURE)?;
        self.obj.uars.insert(uar, Uar);
        let mut o = resp();
        alloc_uar_resp::UAR.set(&mut o, uar.into());
        Ok(o)
    }

    fn dealloc_uar(&mut self, c: &[u8]) -> Res {
        let uar = dealloc_uar_cmd::UAR.get(c) as u16;
        check(self.obj.uars.contains_key(&uar))?;
        let o = &self.obj;
        if o.cqs.values().any(|q| q.uar == uar) || o.qps.values().any(|q| q.uar == uar) {
            return Err(st::RESOURCE_BUSY);
        }
        self.obj.uars.remove(&uar);
        Ok(resp())
    }

    // ------------------------------------------------------------ EQ

    fn create_eq(&mut self, c: &[u8]) -> Res {
        use create_eq_cmd as m;
        let depth = m::DEPTH.get(c);
        let vector = m::MSIX_VEC.get(c) as u16;
        check(depth.is_power_of_two() && depth <= self.profile.max_eq_depth)?;
        check(m::ENTRY_SIZE_WORDS.get(c) as usize * 4 == admin::EQE_SIZE)?;
        // Vector 0 is the management vector; completion EQs take the others.
        check(vector >= 1 && vector < self.profile.msix_vectors)?;
        check(m::EVENT_BITMASK.get(c) & !m::EVENT_COMPLETION == 0)?;
        let base = u64::from(m::BA_HI.get(c)) << 32 | u64::from(m::BA_LO.get(c));
        let eqn = objects::free_u16(&self.obj.eqs, self.profile.max_eq)
            .ok_or(st::RESOURCE_ALLOCATION_FAILURE)?;
        if !self.probe(base, u64::from(depth) * admin::EQE_SIZE as u64) {
            return Err(st::MALFORMED_REQUEST);
        }
        self.obj.eqs.insert(
            eqn,
            Eq {
                base,
                depth: depth as u16,
                vector,
                armed: false,
                pc: 0,
                events: 0,
            },
        );
        let mut o = resp();
        create_eq_resp::EQN.set(&mut o, eqn.into());
        Ok(o)
    }

    fn destroy_eq(&mut self, c: &[u8]) -> Res {
        let eqn = destroy_eq_cmd::EQN.get(c) as u16;
        check(self.obj.eqs.contains_key(&eqn))?;
        if self.obj.cqs.values().any(|q| q.eqn == Some(eqn)) {
            return Err(st::RESOURCE_BUSY);
        }
        self.obj.eqs.remove(&eqn);
        Ok(resp())
    }

    // ------------------------------------------------------------ CQ

    fn create_cq(&mut self, c: &[u8]) -> Res {
        use create_cq_cmd as m;
        let p = &self.profile;
        let words = m::CQ_ENTRY_SIZE_WORDS.get(c);
        check(words == 4 || words == 8)?;
        check(m::SET_SRC_ADDR.get(c) == 0 || words == 8)?;
        let depth = m::CQ_DEPTH.get(c);
        check(depth.is_power_of_two() && depth <= p.max_cq_depth)?;
        let subs = m::NUM_SUB_CQS.get(c);
        check(subs == u32::from(p.sub_cqs_per_cq))?;
        let uar = m::UAR.get(c) as u16;
        check(self.obj.uars.contains_key(&uar))?;
        let eqn = if m::INTERRUPT_MODE_ENABLED.get(c) != 0 {
            let eqn = m::EQN.get(c) as u16;
            check(self.obj.eqs.contains_key(&eqn))?;
            Some(eqn)
        } else {
            None
        };
        let base = u64::from(m::CQ_BA_HI.get(c)) << 32 | u64::from(m::CQ_BA_LO.get(c));
        let len = u64::from(words) * 4 * u64::from(depth) * u64::from(subs);
        if m::VIRT.get(c) != 0 {
            // A ring in virtual memory is named by an MR of the device.
            check(self.obj.mrs.contains_key(&m::L_KEY.get(c)))?;
        } else if !self.probe(base, len) {
            return Err(st::MALFORMED_REQUEST);
        }
        let idx = objects::free_u16(&self.obj.cqs, self.profile.max_cq)
            .ok_or(st::RESOURCE_ALLOCATION_FAILURE)?;
        self.obj.cqs.insert(
            idx,
            Cq {
                base,
                depth: depth as u16,
                entry_size: (words * 4) as u16,
                eqn,
                uar,
                pc: vec![0; subs as usize],
                armed: false,
                cmd_sn: 0,
            },
        );
        let mut o = resp();
        create_cq_resp::CQ_IDX.set(&mut o, idx.into());
        create_cq_resp::CQ_ACTUAL_DEPTH.set(&mut o, depth);
        create_cq_resp::DB_OFFSET.set(&mut o, CQ_DB_BASE + u32::from(idx) * 4);
        create_cq_resp::DB_VALID.set(&mut o, 1);
        Ok(o)
    }

    fn destroy_cq(&mut self, c: &[u8]) -> Res {
        let idx = destroy_cq_cmd::CQ_IDX.get(c) as u16;
        check(self.obj.cqs.contains_key(&idx))?;
        if self
            .obj
            .qps
            .values()
            .any(|q| q.cqs.0 == idx || q.cqs.1 == idx)
        {
            return Err(st::RESOURCE_BUSY);
        }
        self.obj.cqs.remove(&idx);
        Ok(resp())
    }

    // ------------------------------------------------------------ QP

    fn create_qp(&mut self, c: &[u8]) -> Res {
        use create_qp_cmd as m;
        let p = &self.profile;
        let pd = m::PD.get(c) as u16;
        check(self.obj.pds.contains_key(&pd))?;
        let qp_type = m::QP_TYPE.get(c);
        check(qp_type == m::QP_TYPE_UD || qp_type == m::QP_TYPE_SRD)?;
        // Queues in virtual memory are not offered; unsolicited write receive only with the
        // capability.
        check(m::SQ_VIRT.get(c) == 0 && m::RQ_VIRT.get(c) == 0)?;
        check(
            m::UNSOLICITED_WRITE_RECV.get(c) == 0
                || p.device_caps & feature::device_attr::CAP_UNSOLICITED_WRITE_RECV != 0,
        )?;
        check(c[7] & !0x7 == 0)?;
        let send_cq = m::SEND_CQ_IDX.get(c);
        let recv_cq = m::RECV_CQ_IDX.get(c);
        let (Ok(send_cq), Ok(recv_cq)) = (u16::try_from(send_cq), u16::try_from(recv_cq)) else {
            return Err(st::ILLEGAL_PARAMETER);
        };
        check(self.obj.cqs.contains_key(&send_cq) && self.obj.cqs.contains_key(&recv_cq))?;
        let uar = m::UAR.get(c) as u16;
        check(self.obj.uars.contains_key(&uar))?;
        let sq_depth = m::SEND_QUEUE_DEPTH.get(c);
        let sq_ring = m::SEND_QUEUE_RING_SIZE.get(c);
        check(
            sq_depth.is_power_of_two()
                && sq_depth >= u32::from(p.min_sq_depth)
                && sq_depth <= p.max_sq_depth,
        )?;
        check(sq_ring <= p.max_llq_size)?;
        // The LLQ entry size is the ring size over the depth: 64 bytes, or 128 when the device
        // offers `data_polling_128`; anything else is refused.
        let wqe_size = if u64::from(sq_ring) == u64::from(sq_depth) * 64 {
            io::TX_WQE_SIZE
        } else if u64::from(sq_ring) == u64::from(sq_depth) * 128
            && p.device_caps & feature::device_attr::CAP_DATA_POLLING_128 != 0
        {
            io::TX_WQE128_SIZE
        } else {
            return Err(st::ILLEGAL_PARAMETER);
        };
        let rq_depth = m::RECV_QUEUE_DEPTH.get(c);
        let rq_ring = m::RECV_QUEUE_RING_SIZE.get(c);
        check(rq_depth <= p.max_rq_depth)?;
        check(
            u64::from(rq_ring) >= u64::from(rq_depth) * 16
                && u64::from(rq_ring) <= u64::from(p.max_rq_depth) * 16 * u64::from(p.max_sges.1),
        )?;
        let max_qp = p.max_qp;
        let max_llq = p.max_llq_size;
        if rq_ring > 0 && !self.probe(m::RQ_BASE_ADDR.get64(c), rq_ring.into()) {
            return Err(st::MALFORMED_REQUEST);
        }
        let used: std::collections::BTreeSet<u16> = self.obj.qps.values().map(|q| q.qpn).collect();
        if used.len() as u64 >= u64::from(max_qp) {
            return Err(st::RESOURCE_ALLOCATION_FAILURE);
        }
        let Some(qpn) = (1..=u16::try_from(max_qp).unwrap_or(u16::MAX)).find(|n| !used.contains(n))
        else {
            return Err(st::RESOURCE_ALLOCATION_FAILURE);
        };
        let handle = u32::from(self.obj.next_generation()) << 16 | u32::from(qpn);
        self.obj.qps.insert(
            handle,
            Qp {
                qpn,
                qp_type,
                pd,
                uar,
                cqs: (send_cq, recv_cq),
                state: modify_qp_cmd::QP_STATE_RESET,
                qkey: 0,
                sq_psn: 0,
                rnr_retry: 0,
                subs: (0, 0),
                dp: super::dp::QpDp {
                    sq_depth,
                    wqe_size,
                    llq: vec![0; sq_ring as usize],
                    rq_base: m::RQ_BASE_ADDR.get64(c),
                    rq_descs: rq_ring / 16,
                    ..Default::default()
                },
            },
        );
        self.shm_new_qp(qpn);
        let mut o = resp();
        use create_qp_resp as r;
        r::QP_HANDLE.set(&mut o, handle);
        r::QP_NUM.set(&mut o, qpn.into());
        r::SEND_SUB_CQ_IDX.set(&mut o, 0);
        r::RECV_SUB_CQ_IDX.set(&mut o, 0);
        r::SQ_DB_OFFSET.set(&mut o, u32::from(qpn) * 8);
        r::RQ_DB_OFFSET.set(&mut o, u32::from(qpn) * 8 + 4);
        r::LLQ_DESCRIPTORS_OFFSET.set(&mut o, u32::from(qpn).saturating_mul(max_llq));
        Ok(o)
    }

    fn modify_qp(&mut self, c: &[u8]) -> Res {
        use modify_qp_cmd as m;
        let mask = m::MODIFY_MASK.get(c);
        check(mask & !m::MASK_ALL == 0)?;
        let handle = m::QP_HANDLE.get(c);
        let caps = self.profile.device_caps;
        let qp = self.obj.qps.get_mut(&handle).ok_or(st::ILLEGAL_PARAMETER)?;
        let cur = qp.state;
        if mask & m::MASK_CUR_QP_STATE != 0 {
            check(m::CUR_QP_STATE.get(c) == cur)?;
        }
        let new = if mask & m::MASK_QP_STATE != 0 {
            m::QP_STATE.get(c)
        } else {
            cur
        };
        check(new <= m::QP_STATE_ERR)?;
        if mask & m::MASK_QP_STATE != 0 {
            use m::{
                QP_STATE_ERR as ERR, QP_STATE_INIT as INIT, QP_STATE_RESET as RESET,
                QP_STATE_RTR as RTR, QP_STATE_RTS as RTS, QP_STATE_SQD as SQD, QP_STATE_SQE as SQE,
            };
            let legal = matches!(
                (cur, new),
                (_, RESET)
                    | (_, ERR)
                    | (RESET, INIT)
                    | (INIT, INIT)
                    | (INIT, RTR)
                    | (RTR, RTS)
                    | (RTS, RTS)
                    | (RTS, SQD)
                    | (SQD, SQD)
                    | (SQD, RTS)
                    | (SQE, RTS)
            );
            check(legal)?;
            // RESET → INIT sets the Q_Key; RTR → RTS sets the SQ PSN.
            check(!(cur == RESET && new == INIT) || mask & m::MASK_QKEY != 0)?;
            check(!(cur == RTR && new == RTS) || mask & m::MASK_SQ_PSN != 0)?;
        }
        if mask & m::MASK_RNR_RETRY != 0 {
            check(
                qp.qp_type == create_qp_cmd::QP_TYPE_SRD
                    && caps & feature::device_attr::CAP_RNR_RETRY != 0,
            )?;
        }
        qp.state = new;
        if new == m::QP_STATE_RESET {
            qp.qkey = 0;
            qp.sq_psn = 0;
            qp.rnr_retry = 0;
            // The queues start over (the driver's counters do too).
            qp.dp.sq_cc = 0;
            qp.dp.rq_pc = 0;
            qp.dp.rq_cc = 0;
            qp.dp.llq.fill(0);
        }
        if mask & m::MASK_QKEY != 0 {
            qp.qkey = m::QKEY.get(c);
        }
        if mask & m::MASK_SQ_PSN != 0 {
            qp.sq_psn = m::SQ_PSN.get(c);
        }
        if mask & m::MASK_RNR_RETRY != 0 {
            qp.rnr_retry = m::RNR_RETRY.get(c) as u8;
        }
        if new == m::QP_STATE_ERR || new == m::QP_STATE_RESET {
            // Operations in flight end: flushed into the CQ on ERR, dropped on RESET.
            self.drop_qp_transport(handle, new == m::QP_STATE_ERR);
        }
        if new == m::QP_STATE_ERR && cur != m::QP_STATE_ERR {
            // Posted receives complete with FLUSHED.
            self.flush_rq(handle);
        }
        Ok(resp())
    }

    fn query_qp(&mut self, c: &[u8]) -> Res {
        let qp = self
            .obj
            .qps
            .get(&query_qp_cmd::QP_HANDLE.get(c))
            .ok_or(st::ILLEGAL_PARAMETER)?;
        let mut o = resp();
        use query_qp_resp as r;
        r::QP_STATE.set(&mut o, qp.state);
        r::QKEY.set(&mut o, qp.qkey);
        r::SQ_PSN.set(&mut o, qp.sq_psn);
        r::SQ_DRAINING.set(&mut o, 0);
        r::RNR_RETRY.set(&mut o, qp.rnr_retry.into());
        Ok(o)
    }

    fn destroy_qp(&mut self, c: &[u8]) -> Res {
        let handle = destroy_qp_cmd::QP_HANDLE.get(c);
        check(self.obj.qps.contains_key(&handle))?;
        self.drop_qp_transport(handle, false);
        self.obj.qps.remove(&handle);
        Ok(resp())
    }

    // ------------------------------------------------------------ AH

    fn create_ah(&mut self, c: &[u8]) -> Res {
        let pd = create_ah_cmd::PD.get(c) as u16;
        check(self.obj.pds.contains_key(&pd))?;
        let mut dest = [0u8; 16];
        dest.copy_from_slice(
            create_ah_cmd::DEST_ADDR
                .slice(c)
                .ok_or(st::MALFORMED_REQUEST)?,
        );
        check(dest != [0; 16])?;
        let ah = objects::free_u16(&self.obj.ahs, self.profile.max_ah)
            .ok_or(st::RESOURCE_ALLOCATION_FAILURE)?;
        if self.obj.ahs.values().any(|a| a.dest == dest) {
            self.error(DeviceError::DuplicateAh { dest });
        }
        self.obj.ahs.insert(ah, Ah { dest, pd });
        let mut o = resp();
        create_ah_resp::AH.set(&mut o, ah.into());
        Ok(o)
    }

    fn destroy_ah(&mut self, c: &[u8]) -> Res {
        let ah = destroy_ah_cmd::AH.get(c) as u16;
        let pd = destroy_ah_cmd::PD.get(c) as u16;
        check(self.obj.ahs.get(&ah).is_some_and(|a| a.pd == pd))?;
        self.obj.ahs.remove(&ah);
        Ok(resp())
    }

    // ------------------------------------------------------------ MR

    fn reg_mr(&mut self, c: &[u8; admin::ENTRY_SIZE]) -> Res {
        use reg_mr_cmd as m;
        let p = &self.profile;
        let pd = m::PD.get(c) as u16;
        check(self.obj.pds.contains_key(&pd))?;
        check(m::MEM_ADDR_PHY_MODE_EN.get(c) == 0 && c[48] & 0x60 == 0)?;
        let shift = m::PHYS_PAGE_SIZE_SHIFT.get(c);
        check(p.page_size_cap & (1u64 << shift) != 0)?;
        let access = m::PERMISSIONS.get(c);
        check(access & !m::PERMISSIONS_MASK == 0)?;
        let pages = m::PAGE_NUM.get(c);
        check(pages >= 1 && pages <= p.max_mr_pages)?;
        let len = m::MR_LENGTH.get64(c);
        let iova = m::IOVA.get64(c);
        let page = 1u64 << shift;
        // The pages cover the region: [iova, iova + len) from the first page's offset.
        check(
            len > 0
                && (iova & (page - 1))
                    .checked_add(len)
                    .is_some_and(|e| e <= u64::from(pages) << shift),
        )?;
        let flags = c[3];
        let list = if flags & admin::AQ_FLAG_CTRL_DATA == 0 {
            // Inline: at most four addresses in the PBL union.
            check(pages as usize <= m::INLINE_PBL_ENTRIES)?;
            (0..pages as usize)
                .map(|i| u64::from_le_bytes(c[8 + 8 * i..16 + 8 * i].try_into().unwrap_or([0; 8])))
                .collect()
        } else {
            let at = m::PBL_CTRL_OFF;
            let head = CtrlBuffInfo::read_from(&c[at..at + CtrlBuffInfo::SIZE])
                .ok_or(st::MALFORMED_REQUEST)?;
            if flags & admin::AQ_FLAG_CTRL_DATA_INDIRECT != 0 {
                self.read_chunks(head, pages as usize)?
            } else {
                if head.length.get() as u64 != u64::from(pages) * 8 {
                    return Err(st::MALFORMED_REQUEST);
                }
                self.read_addrs(head.addr(), pages as usize)?
            }
        };
        check(list.iter().all(|a| a & (page - 1) == 0))?;
        let used: std::collections::BTreeSet<u32> = self.obj.mrs.keys().map(|k| k >> 8).collect();
        let max_mr = self.profile.max_mr.min(0xffff);
        if used.len() as u64 >= u64::from(max_mr) {
            return Err(st::RESOURCE_ALLOCATION_FAILURE);
        }
        let idx = (1..=max_mr)
            .find(|i| !used.contains(i))
            .ok_or(st::RESOURCE_ALLOCATION_FAILURE)?;
        let key = idx << 8 | u32::from(self.obj.next_generation());
        self.obj.mrs.insert(
            key,
            Mr {
                pd,
                iova,
                len,
                page_shift: shift as u8,
                pages: list,
                access: access as u8,
            },
        );
        let mut o = resp();
        reg_mr_resp::L_KEY.set(&mut o, key);
        reg_mr_resp::R_KEY.set(&mut o, key);
        Ok(o)
    }

    /// Reads `n` page addresses at `addr` (MALFORMED_REQUEST when unreadable).
    fn read_addrs(&mut self, addr: u64, n: usize) -> Result<Vec<u64>, u8> {
        let mut raw = vec![0u8; n * 8];
        self.dma_read(addr, &mut raw)
            .map_err(|_| st::MALFORMED_REQUEST)?;
        Ok(raw
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect())
    }

    /// Walks an indirect page list: chunks of up to 510 addresses, each but the last ending
    /// in the link to the next (`docs/efa.md#queue-mechanics`).
    fn read_chunks(&mut self, head: CtrlBuffInfo, pages: usize) -> Result<Vec<u64>, u8> {
        let mut out = Vec::with_capacity(pages);
        let mut cur = head;
        while out.len() < pages {
            let left = pages - out.len();
            let n = left.min(admin::PBL_CHUNK_ENTRIES);
            let more = left > n;
            let want = n * 8 + if more { CtrlBuffInfo::SIZE } else { 0 };
            if cur.length.get() as usize != want {
                return Err(st::MALFORMED_REQUEST);
            }
            out.extend(self.read_addrs(cur.addr(), n)?);
            if more {
                let mut link = [0u8; CtrlBuffInfo::SIZE];
                self.dma_read(cur.addr() + admin::PBL_CHUNK_LINK as u64, &mut link)
                    .map_err(|_| st::MALFORMED_REQUEST)?;
                cur = CtrlBuffInfo::from_bytes(&link);
            }
        }
        Ok(out)
    }

    fn dereg_mr(&mut self, c: &[u8]) -> Res {
        let key = dereg_mr_cmd::L_KEY.get(c);
        self.obj.mrs.remove(&key).ok_or(st::ILLEGAL_PARAMETER)?;
        Ok(resp())
    }

    // ------------------------------------------------------------ features

    fn get_feature(&mut self, c: &[u8]) -> Res {
        let p = &self.profile;
        let mut o = resp();
        let at = get_feature_resp::DATA_OFF;
        match feature_cmd::FEATURE_ID.get(c) as u8 {
            id::DEVICE_ATTR => {
                use feature::device_attr as d;
                d::SUPPORTED_FEATURES
                    .at(at)
                    .set64(&mut o, p.supported_features());
                d::PAGE_SIZE_CAP.at(at).set64(&mut o, p.page_size_cap);
                d::FW_VERSION.at(at).set(&mut o, p.fw_version);
                d::ADMIN_API_VERSION.at(at).set(&mut o, p.admin_api_version);
                d::DEVICE_VERSION.at(at).set(&mut o, p.device_version);
                d::DB_BAR.at(at).set(&mut o, p.db_bar.into());
                d::PHYS_ADDR_WIDTH
                    .at(at)
                    .set(&mut o, p.addr_widths.0.into());
                d::VIRT_ADDR_WIDTH
                    .at(at)
                    .set(&mut o, p.addr_widths.1.into());
                d::DEVICE_CAPS.at(at).set(&mut o, p.device_caps);
                d::MAX_RDMA_SIZE.at(at).set(&mut o, p.max_rdma_size);
                d::GUID.at(at).set64(&mut o, p.guid);
                d::MAX_LINK_SPEED_GBPS
                    .at(at)
                    .set(&mut o, p.link_speed_gbps.into());
            }
            id::QUEUE_ATTR => {
                use feature::queue_attr as q;
                let f = |o: &mut Resp, f: firmware_interface::LeField, v: u32| {
                    f.at(at).set(o, v);
                };
                f(&mut o, q::MAX_QP, p.max_qp);
                f(&mut o, q::MAX_SQ_DEPTH, p.max_sq_depth);
                f(&mut o, q::INLINE_BUF_SIZE, p.inline_buf_size);
                f(&mut o, q::MAX_RQ_DEPTH, p.max_rq_depth);
                f(&mut o, q::MAX_CQ, p.max_cq);
                f(&mut o, q::MAX_CQ_DEPTH, p.max_cq_depth);
                f(&mut o, q::SUB_CQS_PER_CQ, p.sub_cqs_per_cq.into());
                f(&mut o, q::MIN_SQ_DEPTH, p.min_sq_depth.into());
                f(&mut o, q::MAX_WR_SEND_SGES, p.max_sges.0.into());
                f(&mut o, q::MAX_WR_RECV_SGES, p.max_sges.1.into());
                f(&mut o, q::MAX_MR, p.max_mr);
                f(&mut o, q::MAX_MR_PAGES, p.max_mr_pages);
                f(&mut o, q::MAX_PD, p.max_pd);
                f(&mut o, q::MAX_AH, p.max_ah);
                f(&mut o, q::MAX_LLQ_SIZE, p.max_llq_size);
                f(&mut o, q::MAX_WR_RDMA_SGES, p.max_sges.2.into());
                f(&mut o, q::MAX_TX_BATCH, p.max_tx_batch.into());
            }
            id::NETWORK_ATTR => {
                use feature::network_attr as n;
                if let Some(s) = n::ADDR.at(at).slice_mut(&mut o) {
                    s.copy_from_slice(&p.gid);
                }
                n::MTU.at(at).set(&mut o, p.mtu);
            }
            id::AENQ_CONFIG => {
                use feature::aenq_config as a;
                a::SUPPORTED_GROUPS.at(at).set(&mut o, p.aenq_groups);
                a::ENABLED_GROUPS.at(at).set(&mut o, self.obj.aenq_enabled);
            }
            id::EVENT_QUEUE_ATTR => {
                use feature::event_queue_attr as e;
                e::MAX_EQ.at(at).set(&mut o, p.max_eq);
                e::MAX_EQ_DEPTH.at(at).set(&mut o, p.max_eq_depth);
                e::EVENT_BITMASK
                    .at(at)
                    .set(&mut o, create_eq_cmd::EVENT_COMPLETION);
            }
            id::HW_HINTS => {
                use feature::hw_hints as h;
                for (f, v) in [
                    h::MMIO_READ_TIMEOUT,
                    h::DRIVER_WATCHDOG_TIMEOUT,
                    h::ADMIN_COMPLETION_TIMEOUT,
                    h::POLL_INTERVAL,
                ]
                .into_iter()
                .zip(p.hw_hints)
                {
                    f.at(at).set(&mut o, v.into());
                }
            }
            // HOST_INFO is set-only; every other id is unknown.
            _ => return Err(st::ILLEGAL_PARAMETER),
        }
        Ok(o)
    }

    fn set_feature(&mut self, c: &[u8; admin::ENTRY_SIZE]) -> Res {
        let at = feature_cmd::DATA_OFF;
        match feature_cmd::FEATURE_ID.get(c) as u8 {
            id::AENQ_CONFIG => {
                let groups = feature::aenq_config::ENABLED_GROUPS.at(at).get(c);
                check(groups & !self.profile.aenq_groups == 0)?;
                self.obj.aenq_enabled = groups;
            }
            id::HOST_INFO => {
                check(c[3] & admin::AQ_FLAG_CTRL_DATA != 0)?;
                check(c[3] & admin::AQ_FLAG_CTRL_DATA_INDIRECT == 0)?;
                let b = CtrlBuffInfo::read_from(&c[4..16]).ok_or(st::MALFORMED_REQUEST)?;
                let len = b.length.get();
                if (len as usize) < feature::host_info::SIZE || len > MAX_CTRL_BUFFER {
                    return Err(st::MALFORMED_REQUEST);
                }
                let mut buf = vec![0u8; len as usize];
                self.dma_read(b.addr(), &mut buf)
                    .map_err(|_| st::MALFORMED_REQUEST)?;
                self.obj.host_info = Some(buf);
            }
            _ => return Err(st::ILLEGAL_PARAMETER),
        }
        Ok(resp())
    }

    fn get_stats(&mut self, c: &[u8]) -> Res {
        use get_stats_cmd as m;
        check(m::TYPE.get(c) <= m::TYPE_NETWORK)?;
        match m::SCOPE.get(c) {
            m::SCOPE_ALL => {}
            m::SCOPE_QUEUE => {
                let qpn = m::SCOPE_MODIFIER.get(c) as u16;
                check(self.obj.qps.values().any(|q| q.qpn == qpn))?;
            }
            _ => return Err(st::ILLEGAL_PARAMETER),
        }
        // No data path yet: every counter is zero.
        Ok(resp())
    }
}
