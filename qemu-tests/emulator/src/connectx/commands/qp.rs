//! CREATE_QP, DESTROY_QP, the QP state machine (RST2INIT … 2RST) and QUERY_QP.
//!
//! Transitions (IB spec 10.3 / PRM): RST→INIT (RST2INIT), INIT→INIT (INIT2INIT), INIT→RTR
//! (INIT2RTR), RTR→RTS (RTR2RTS), RTS→RTS (RTS2RTS), SQER→RTS (SQERR2RTS), SQD→RTS
//! (SQD_RTS), any→ERR (2ERR), any→RST (2RST). Any other (opcode, state) pair is BAD_QP_STATE.
//!
//! Each transition copies its mandatory parameters from the input context and its optional
//! ones only when their `opt_param_mask` bit is set; a mask bit that the transition does not
//! allow for the QP's service type is BAD_PARAM. Fields fixed at CREATE_QP (st, pd, CQs, UAR,
//! queue sizes, buffer, doorbell record) may be repeated in a modify but not changed.

use firmware_interface::ctx::{ads as a, cmd_hca_cap as g, qpc as q, roce_addr_layout};
use firmware_interface::{Field, cmd_status as st, cmds, opcode as op};

use super::{CmdResult, Fail, Input, bad_param, fail, no_object, out};
use crate::connectx::objects::{QP1, Qp};
use crate::connectx::state::PKEY_TABLE_LEN;
use crate::{Device, syndrome as syn};

use q::optpar as opt;

/// Offset of the primary address path inside the QP context.
const PATH: usize = q::PRIMARY_ADDRESS_PATH.byte_off();
/// Offset of the QP context in the create / modify / query messages.
const QPC: usize = cmds::create_qp_in::QPC.byte_off();

/// An address-path field, relative to the QP context.
const fn p(f: Field) -> Field {
    f.at(PATH)
}

fn cap(d: &Device, f: Field) -> u32 {
    f.get(&d.hca.cap_cur.general)
}

fn is_datagram(st: u32) -> bool {
    st == q::ST_UD || st == q::ST_QP1
}

/// Copies field `f` (relative to the QP context) from `src` to `dst`.
fn cp(dst: &mut [u8], src: &[u8], f: Field) {
    if f.width > 32 {
        if let (Some(s), Some(d)) = (f.slice(src), f.slice_mut(dst)) {
            d.copy_from_slice(s);
        }
    } else {
        f.set(dst, f.get(src));
    }
}

fn ctx_of<'a>(input: &Input<'a>) -> &'a [u8] {
    input.bytes(cmds::create_qp_in::QPC)
}

pub(super) fn create_qp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::create_qp_in as i;
    let ctx = ctx_of(input);
    let c = |f: Field| f.get(ctx);
    if input.get(i::QPC_EXT) != 0
        || input.get(i::INPUT_QPN) != 0
        || input.get(i::WQ_UMEM_VALID) != 0
        || c(q::DBR_UMEM_VALID) != 0
    {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let st = c(q::ST);
    if ![q::ST_RC, q::ST_UC, q::ST_UD, q::ST_QP1].contains(&st) {
        return Err(bad_param(syn::BAD_ST));
    }
    if c(q::STATE) != q::STATE_RST {
        return Err(bad_param(syn::BAD_INITIAL_STATE));
    }
    let pd = c(q::PD);
    if !d.obj.pds.contains(pd) {
        return Err(bad_param(syn::BAD_PD));
    }
    let rq_type = c(q::RQ_TYPE);
    if rq_type != q::RQ_TYPE_REGULAR && rq_type != q::RQ_TYPE_ZERO && rq_type != q::RQ_TYPE_SRQ {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let no_sq = c(q::NO_SQ) != 0;
    if no_sq && rq_type == q::RQ_TYPE_ZERO {
        return Err(bad_param(syn::NO_QUEUES));
    }
    let max_sz = cap(d, g::LOG_MAX_QP_SZ);
    let mut rq_bytes = 0u64;
    let mut rq = None;
    let mut cqn_rcv = None;
    if rq_type == q::RQ_TYPE_REGULAR {
        let (log, stride) = (c(q::LOG_RQ_SIZE), c(q::LOG_RQ_STRIDE));
        if log > max_sz {
            return Err(bad_param(syn::BAD_LOG_SIZE));
        }
        if 16u32 << stride > cap(d, g::MAX_WQE_SZ_RQ) {
            return Err(bad_param(syn::BAD_WQE_SIZE));
        }
        let cqn = c(q::CQN_RCV);
        if !d.obj.cqs.contains(cqn) {
            return Err(bad_param(syn::BAD_CQ));
        }
        rq_bytes = (16u64 << stride) << log;
        rq = Some((log as u8, stride as u8));
        cqn_rcv = Some(cqn);
    }
    let mut srqn = None;
    if rq_type == q::RQ_TYPE_SRQ {
        // Receives come from the SRQ; completions still go to the QP's receive CQ.
        let n = c(q::SRQN_RMPN_XRQN);
        if !d.obj.srqs.contains(n) {
            return Err(bad_param(syn::BAD_SRQ));
        }
        let cqn = c(q::CQN_RCV);
        if !d.obj.cqs.contains(cqn) {
            return Err(bad_param(syn::BAD_CQ));
        }
        srqn = Some(n);
        cqn_rcv = Some(cqn);
    }
    let mut sq_bytes = 0u64;
    let mut sq = None;
    let mut cqn_snd = None;
    if !no_sq {
        let log = c(q::LOG_SQ_SIZE);
        if log > max_sz {
            return Err(bad_param(syn::BAD_LOG_SIZE));
        }
        let cqn = c(q::CQN_SND);
        if !d.obj.cqs.contains(cqn) {
            return Err(bad_param(syn::BAD_CQ));
        }
        sq_bytes = 64u64 << log;
        sq = Some(log as u8);
        cqn_snd = Some(cqn);
    }
    let uar = c(q::UAR_PAGE);
    if (!no_sq || uar != 0) && !d.obj.uars.contains(uar) {
        return Err(bad_param(syn::BAD_UAR));
    }
    if c(q::LOG_MSG_MAX) > cap(d, g::LOG_MAX_MSG) {
        return Err(bad_param(syn::BAD_MSG_SIZE));
    }
    let dbr_addr = q::DBR_ADDR.get64(ctx);
    d.check_dbr(dbr_addr)?;
    let log_page_size = c(q::LOG_PAGE_SIZE);
    let pas = d.read_pas(input, rq_bytes + sq_bytes, log_page_size, c(q::PAGE_OFFSET))?;
    if st == q::ST_QP1 && d.obj.qps.contains(QP1) {
        return Err(fail(st::NO_RES, syn::QP1_EXISTS));
    }
    let qp = Qp {
        st,
        state: q::STATE_RST as u8,
        pd,
        cqn_snd,
        cqn_rcv,
        uar,
        dbr_addr,
        log_page_size: log_page_size as u8,
        pas,
        rq,
        sq,
        srqn,
        qpc: ctx.to_vec(),
        created: ctx.to_vec(),
        dp: Default::default(),
    };
    let qpn = if st == q::ST_QP1 {
        d.obj.qps.insert_special(QP1, qp);
        QP1
    } else {
        d.obj
            .qps
            .alloc(qp)
            .ok_or(fail(st::NO_RES, syn::TABLE_FULL))?
    };
    let mut r = out(cmds::create_qp_out::SIZE);
    cmds::create_qp_out::QPN.set(&mut r, qpn);
    Ok(r)
}

fn qp_in_range(d: &Device, qpn: u32) -> bool {
    qpn == QP1 || d.obj.qps.in_range(qpn)
}

pub(super) fn destroy_qp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let qpn = input.get(cmds::destroy_qp_in::QPN);
    if d.obj.qps.remove(qpn).is_none() {
        return Err(no_object(qp_in_range(d, qpn)));
    }
    Ok(out(cmds::destroy_qp_out::SIZE))
}

/// The failure for a QPN that names no QP.
fn no_qp(d: &Device, qpn: u32) -> Fail {
    let mut f = no_object(qp_in_range(d, qpn));
    f.syndrome = syn::BAD_QPN;
    f
}

/// Fields fixed at CREATE_QP: a modify may repeat them (or leave 0) but not change them.
const IMMUTABLE: &[Field] = &[
    q::ST,
    q::PD,
    q::CQN_SND,
    q::CQN_RCV,
    q::UAR_PAGE,
    q::LOG_RQ_SIZE,
    q::LOG_RQ_STRIDE,
    q::LOG_SQ_SIZE,
    q::NO_SQ,
    q::RQ_TYPE,
    q::SRQN_RMPN_XRQN,
    q::LOG_PAGE_SIZE,
];

/// Optional parameters each transition accepts, for (connected, datagram) QPs.
fn allowed_opt(opcode: u16) -> (u32, u32) {
    let access = opt::RRE | opt::RAE | opt::RWE;
    match opcode {
        // All of these are mandatory at RST2INIT; drivers may flag them anyway.
        op::RST2INIT_QP | op::INIT2INIT_QP => {
            let m = opt::PKEY_INDEX | opt::Q_KEY | access | opt::PRI_PORT | opt::COUNTER_SET_ID;
            (m, m)
        }
        op::INIT2RTR_QP => (
            access
                | opt::PKEY_INDEX
                | opt::PRIMARY_ADDR_PATH
                | opt::LAG_TX_AFF
                | opt::COUNTER_SET_ID,
            opt::PKEY_INDEX | opt::Q_KEY | opt::LAG_TX_AFF | opt::COUNTER_SET_ID,
        ),
        op::RTR2RTS_QP => (
            access | opt::RNR_TIMEOUT | opt::PM_STATE | opt::OFFLOAD_TYPE,
            opt::Q_KEY,
        ),
        op::RTS2RTS_QP => (
            access | opt::RNR_TIMEOUT | opt::PM_STATE | opt::ACK_TIMEOUT,
            opt::Q_KEY,
        ),
        _ => (0, 0),
    }
}

/// Copies the optional access bits selected by `mask`.
fn copy_access(new: &mut [u8], ctx: &[u8], mask: u32) {
    if mask & opt::RRE != 0 {
        cp(new, ctx, q::RRE);
    }
    if mask & opt::RWE != 0 {
        cp(new, ctx, q::RWE);
    }
    if mask & opt::RAE != 0 {
        cp(new, ctx, q::RAE);
        cp(new, ctx, q::ATOMIC_MODE);
    }
}

fn check_port_pkey(new: &[u8]) -> Result<(), Fail> {
    if p(a::VHCA_PORT_NUM).get(new) != 1 {
        return Err(bad_param(syn::BAD_PORT));
    }
    if p(a::PKEY_INDEX).get(new) >= PKEY_TABLE_LEN {
        return Err(bad_param(syn::BAD_PKEY_INDEX));
    }
    Ok(())
}

/// Checks the primary path of a connected QP at INIT2RTR.
fn check_path(d: &Device, new: &[u8]) -> Result<(), Fail> {
    check_port_pkey(new)?;
    let nonzero = |f: Field| f.slice(new).is_some_and(|s| s.iter().any(|b| *b != 0));
    if d.profile.port_type_eth {
        let idx = p(a::SRC_ADDR_INDEX).get(new) as usize;
        let gid_set = d.hca.gids.get(idx).is_some_and(|e| {
            roce_addr_layout::SOURCE_L3_ADDRESS
                .slice(e)
                .is_some_and(|g| g.iter().any(|b| *b != 0))
        });
        if !gid_set || !nonzero(p(a::RGID_RIP)) || !nonzero(p(a::RMAC)) {
            return Err(bad_param(syn::BAD_PATH));
        }
    } else if p(a::RLID).get(new) == 0 {
        return Err(bad_param(syn::BAD_PATH));
    }
    Ok(())
}

pub(super) fn modify_qp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    let opcode = input.opcode();
    let qpn = input.get(cmds::rst2init_qp_in::QPN);
    let Some(qp) = d.obj.qps.get(qpn) else {
        return Err(no_qp(d, qpn));
    };
    let cur = u32::from(qp.state);
    let (from_ok, to) = match opcode {
        op::RST2INIT_QP => (cur == q::STATE_RST, q::STATE_INIT),
        op::INIT2INIT_QP => (cur == q::STATE_INIT, q::STATE_INIT),
        op::INIT2RTR_QP => (cur == q::STATE_INIT, q::STATE_RTR),
        op::RTR2RTS_QP => (cur == q::STATE_RTR, q::STATE_RTS),
        op::RTS2RTS_QP => (cur == q::STATE_RTS, q::STATE_RTS),
        op::SQERR2RTS_QP => (cur == q::STATE_SQER, q::STATE_RTS),
        op::SQD_RTS_QP => (cur == q::STATE_SQD, q::STATE_RTS),
        op::QP_2ERR => (true, q::STATE_ERR),
        _ => (true, q::STATE_RST), // QP_2RST
    };
    if !from_ok {
        return Err(fail(st::BAD_QP_STATE, syn::BAD_STATE_TRANSITION));
    }
    if opcode == op::QP_2ERR || opcode == op::QP_2RST {
        if let Some(qp) = d.obj.qps.get_mut(qpn) {
            if opcode == op::QP_2RST {
                qp.qpc = qp.created.clone();
            }
            qp.state = to as u8;
        }
        d.qp_transition(qpn, cur as u8, to as u8);
        return Ok(out(cmds::qp_2err_out::SIZE));
    }
    let ctx = ctx_of(input);
    let st_ = qp.st;
    let dgram = is_datagram(st_);
    let mut new = qp.qpc.clone();
    // Fields fixed at create.
    for f in IMMUTABLE {
        let v = f.get(ctx);
        if v != 0 && v != f.get(&new) {
            return Err(bad_param(syn::IMMUTABLE_FIELD));
        }
    }
    let dbr = q::DBR_ADDR.get64(ctx);
    if dbr != 0 && dbr != qp.dbr_addr {
        return Err(bad_param(syn::IMMUTABLE_FIELD));
    }
    let mask = input.get(cmds::rst2init_qp_in::OPT_PARAM_MASK);
    let (conn_ok, dg_ok) = allowed_opt(opcode);
    if mask & !(if dgram { dg_ok } else { conn_ok }) != 0 {
        return Err(bad_param(syn::BAD_OPT_PARAM));
    }
    match opcode {
        op::RST2INIT_QP => {
            for f in [
                p(a::PKEY_INDEX),
                p(a::VHCA_PORT_NUM),
                q::PM_STATE,
                q::COUNTER_SET_ID,
                q::RLKY,
                q::FRE,
            ] {
                cp(&mut new, ctx, f);
            }
            if dgram {
                cp(&mut new, ctx, q::Q_KEY);
            } else {
                copy_access(&mut new, ctx, opt::RRE | opt::RWE | opt::RAE);
            }
            check_port_pkey(&new)?;
        }
        op::INIT2INIT_QP => {
            if mask & opt::PKEY_INDEX != 0 {
                cp(&mut new, ctx, p(a::PKEY_INDEX));
            }
            if mask & opt::PRI_PORT != 0 {
                cp(&mut new, ctx, p(a::VHCA_PORT_NUM));
            }
            if mask & opt::Q_KEY != 0 {
                cp(&mut new, ctx, q::Q_KEY);
            }
            if mask & opt::COUNTER_SET_ID != 0 {
                cp(&mut new, ctx, q::COUNTER_SET_ID);
            }
            copy_access(&mut new, ctx, mask);
            check_port_pkey(&new)?;
        }
        op::INIT2RTR_QP => {
            if d.profile.port_type_eth && !d.hca.roce_en {
                return Err(bad_param(syn::ROCE_DISABLED));
            }
            if dgram {
                if mask & opt::PKEY_INDEX != 0 {
                    cp(&mut new, ctx, p(a::PKEY_INDEX));
                }
                if mask & opt::Q_KEY != 0 {
                    cp(&mut new, ctx, q::Q_KEY);
                }
                // The path MTU and the message size limit are mandatory here for datagram QPs
                // too (Linux: UD 4096 / 2^12, GSI 256 / 2^8): a UD send larger than either is
                // a local length error.
                cp(&mut new, ctx, q::MTU);
                cp(&mut new, ctx, q::LOG_MSG_MAX);
                if !(q::MTU_256..=q::MTU_4096).contains(&q::MTU.get(&new)) {
                    return Err(bad_param(syn::BAD_MTU));
                }
                check_port_pkey(&new)?;
            } else {
                for f in [
                    q::MTU,
                    q::LOG_MSG_MAX,
                    q::REMOTE_QPN,
                    q::PRIMARY_ADDRESS_PATH,
                    q::NEXT_RCV_PSN,
                    q::LOG_ACK_REQ_FREQ,
                ] {
                    cp(&mut new, ctx, f);
                }
                if st_ == q::ST_RC {
                    cp(&mut new, ctx, q::MIN_RNR_NAK);
                    cp(&mut new, ctx, q::LOG_RRA_MAX);
                }
                copy_access(&mut new, ctx, mask);
                if !(q::MTU_256..=q::MTU_4096).contains(&q::MTU.get(&new)) {
                    return Err(bad_param(syn::BAD_MTU));
                }
                if q::REMOTE_QPN.get(&new) <= QP1 {
                    return Err(bad_param(syn::BAD_REMOTE_QPN));
                }
                if q::LOG_RRA_MAX.get(&new) > cap(d, g::LOG_MAX_RA_RES_QP) {
                    return Err(bad_param(syn::BAD_RA_DEPTH));
                }
                check_path(d, &new)?;
            }
            if q::LOG_MSG_MAX.get(&new) > cap(d, g::LOG_MAX_MSG) {
                return Err(bad_param(syn::BAD_MSG_SIZE));
            }
        }
        op::RTR2RTS_QP | op::RTS2RTS_QP => {
            if opcode == op::RTR2RTS_QP {
                cp(&mut new, ctx, q::NEXT_SEND_PSN);
                if st_ == q::ST_RC {
                    for f in [
                        p(a::ACK_TIMEOUT),
                        q::RETRY_COUNT,
                        q::RNR_RETRY,
                        q::LOG_SRA_MAX,
                    ] {
                        cp(&mut new, ctx, f);
                    }
                }
            }
            if mask & opt::ACK_TIMEOUT != 0 {
                cp(&mut new, ctx, p(a::ACK_TIMEOUT));
            }
            if mask & opt::RNR_TIMEOUT != 0 {
                cp(&mut new, ctx, q::MIN_RNR_NAK);
            }
            if mask & opt::PM_STATE != 0 {
                cp(&mut new, ctx, q::PM_STATE);
            }
            if mask & opt::Q_KEY != 0 {
                cp(&mut new, ctx, q::Q_KEY);
            }
            copy_access(&mut new, ctx, mask);
            if q::LOG_SRA_MAX.get(&new) > cap(d, g::LOG_MAX_RA_REQ_QP) {
                return Err(bad_param(syn::BAD_RA_DEPTH));
            }
        }
        _ => {} // SQERR2RTS / SQD_RTS: those states are never entered here.
    }
    if let Some(qp) = d.obj.qps.get_mut(qpn) {
        qp.qpc = new;
        qp.state = to as u8;
    }
    d.qp_transition(qpn, cur as u8, to as u8);
    Ok(out(cmds::modify_qp_out::SIZE))
}

pub(super) fn query_qp(d: &mut Device, input: &Input<'_>) -> CmdResult {
    use cmds::query_qp_out as o;
    let qpn = input.get(cmds::query_qp_in::QPN);
    if input.get(cmds::query_qp_in::QPC_EXT) != 0 {
        return Err(bad_param(syn::UNSUPPORTED));
    }
    let Some(qp) = d.obj.qps.get(qpn) else {
        return Err(no_qp(d, qpn));
    };
    let fixed = o::QP_PAS_OR_QPC_EXT_AND_PAS.byte_off();
    let n = ((input.outlen - fixed) / 8).min(qp.pas.len());
    let mut r = out(fixed + 8 * n);
    r[QPC..QPC + qp.qpc.len()].copy_from_slice(&qp.qpc);
    q::STATE.at(QPC).set(&mut r, u32::from(qp.state));
    // The data path's live counters.
    let dp = &qp.dp;
    if qp.state != q::STATE_RST as u8 && qp.state != q::STATE_INIT as u8 {
        q::NEXT_RCV_PSN.at(QPC).set(&mut r, dp.resp.epsn);
        q::RMSN.at(QPC).set(&mut r, dp.resp.msn);
        if qp.state != q::STATE_RTR as u8 {
            q::NEXT_SEND_PSN.at(QPC).set(&mut r, dp.sq.next_psn);
            let last = dp.sq.una.wrapping_sub(1) & 0xff_ffff;
            q::LAST_ACKED_PSN.at(QPC).set(&mut r, last);
        }
    }
    q::HW_SQ_WQEBB_COUNTER
        .at(QPC)
        .set(&mut r, u32::from(dp.sq.ci));
    q::HW_RQ_COUNTER.at(QPC).set(&mut r, u32::from(dp.rq_ci));
    for (k, a) in qp.pas.iter().take(n).enumerate() {
        r[fixed + 8 * k..fixed + 8 * k + 8].copy_from_slice(&a.to_be_bytes());
    }
    Ok(r)
}
