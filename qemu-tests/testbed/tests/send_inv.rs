//! SEND with invalidate between two NICs through the mlx5 driver: the key named by the
//! request is invalidated on the responder, whose receive completion reports it (WITH_INV and
//! the rkey); a later RDMA write through it fails with a remote access error. A key registered
//! without remote invalidation (every `reg_mr` MR) is refused: both sides complete with the
//! remote invalid request error.

mod common;

use common::*;
use mlx5::raw::{MkeyAccess, RawDevice};
use mlx5::{Ah, Qp};
use verbs::{
    AccessFlags, MemoryRegion, QpState, QpType, RemoteOp, SendFlags, SendWr, Sge, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};

const MEM: usize = 64 * 1024;
/// B's receive buffer.
const RBUF: usize = 16 * 1024;
/// B's invalidatable area (whole pages).
const TGT: usize = 32 * 1024;
const TGT_LEN: usize = 8192;

fn fresh(a: &Node, b: &Node) -> (Qp, Qp) {
    let (mut qa, _) = a.qp(QpType::Rc, CAP, false);
    let (mut qb, _) = b.qp(QpType::Rc, CAP, false);
    let (na, nb) = (qa.qpn(), qb.qpn());
    a.connect(&mut qa, b, nb, &Conn::default());
    b.connect(
        &mut qb,
        a,
        na,
        &Conn {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            ..Conn::default()
        },
    );
    (qa, qb)
}

/// An mkey of B's PD over `[TGT, TGT + TGT_LEN)` of its buffer that a SEND with invalidate
/// may invalidate. (Never destroyed: the node's buffer outlives the device.)
fn invalidatable(b: &Node) -> mlx5::raw::Mkey {
    let win = b.mem.slice(TGT..TGT + TGT_LEN).unwrap();
    let pages: Vec<u64> = match win.pages() {
        Some(p) => p.to_vec(),
        None => (0..TGT_LEN as u64 / 4096)
            .map(|i| win.addr() + i * 4096)
            .collect(),
    };
    let access = MkeyAccess::LOCAL_WRITE
        | MkeyAccess::REMOTE_WRITE
        | MkeyAccess::REMOTE_READ
        | MkeyAccess::REMOTE_INVALIDATE;
    // SAFETY: the pages are B's buffer, which stays allocated and mapped for the whole test
    // (the node and its device are dropped together at its end).
    unsafe {
        RawDevice::create_mkey(
            &b.dev,
            b.pd.pdn(),
            win.addr(),
            TGT_LEN as u64,
            access,
            &pages,
        )
    }
    .unwrap()
}

fn send_inv<'a>(wr_id: u64, sg: &'a [Sge], rkey: u32) -> SendWr<'a, Ah> {
    SendWr {
        wr_id,
        opcode: WrOpcode::SendWithInv,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: rkey,
        ..SendWr::default()
    }
}

fn write_to<'a>(wr_id: u64, sg: &'a [Sge], addr: u64, rkey: u32) -> SendWr<'a, Ah> {
    SendWr {
        wr_id,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        remote: RemoteOp::Rdma {
            remote_addr: addr,
            rkey,
        },
        ..SendWr::default()
    }
}

#[test]
fn send_with_invalidate_invalidates_the_key() {
    let (world, a, b) = pair(71, MEM);
    let (mut qa, mut qb) = fresh(&a, &b);
    let key = invalidatable(&b);
    a.write(0, &pattern(7, 4096));
    let src = [a.sge(0, 64)];
    // The key works.
    a.post_send(&mut qa, &[write_to(1, &src, b.addr(TGT), key.rkey())]);
    assert_eq!(
        summary(&poll_n(&world, &a, &a.cq, 1)),
        [(1, WcStatus::Success)]
    );
    assert_eq!(b.read(TGT, 64), pattern(7, 4096)[..64]);
    // A three-packet SEND (MTU 1024) invalidating it.
    let rsg = [b.sge(RBUF, 4096)];
    b.post_recv(&mut qb, 10, &rsg);
    let msg = [a.sge(0, 2500)];
    a.post_send(&mut qa, &[send_inv(2, &msg, key.rkey())]);
    let s = poll_n(&world, &a, &a.cq, 1);
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode),
        (2, WcStatus::Success, WcOpcode::Send)
    );
    let r = poll_n(&world, &b, &b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (10, WcStatus::Success, WcOpcode::Recv, 2500)
    );
    assert_eq!(r[0].wc_flags, WcFlags::WITH_INV);
    assert_eq!(r[0].imm_data, key.rkey());
    assert_eq!(b.read(RBUF, 2500), pattern(7, 4096)[..2500]);
    // A later write through the key is a remote access error; the memory stays as it was.
    let before = b.read(TGT, TGT_LEN);
    a.write(0, &pattern(8, 4096));
    a.post_send(&mut qa, &[write_to(3, &src, b.addr(TGT), key.rkey())]);
    assert_eq!(
        summary(&poll_n(&world, &a, &a.cq, 1)),
        [(3, WcStatus::RemAccessErr)]
    );
    assert_eq!(b.read(TGT, TGT_LEN), before);
    assert_eq!(a.qp_state(&qa), QpState::Err);
    a.no_device_errors();
    b.no_device_errors();
}

#[test]
fn send_with_invalidate_of_a_registered_mr_is_refused() {
    let (world, a, b) = pair(72, MEM);
    let (mut qa, mut qb) = fresh(&a, &b);
    let rsg = [b.sge(RBUF, 4096)];
    b.post_recv(&mut qb, 10, &rsg);
    let msg = [a.sge(0, 100)];
    // B's `reg_mr` MR: not remotely invalidatable.
    a.post_send(&mut qa, &[send_inv(2, &msg, b.mr.rkey())]);
    assert_eq!(
        summary(&poll_n(&world, &a, &a.cq, 1)),
        [(2, WcStatus::RemInvReqErr)]
    );
    let r = poll_n(&world, &b, &b.cq, 1);
    assert_eq!((r[0].wr_id, r[0].status), (10, WcStatus::RemInvReqErr));
    assert_eq!(a.qp_state(&qa), QpState::Err);
    assert_eq!(b.qp_state(&qb), QpState::Err);
    // The MR still works (through a fresh pair of QPs).
    let (mut qa, _qb) = fresh(&a, &b);
    let src = [a.sge(0, 64)];
    a.post_send(&mut qa, &[write_to(4, &src, b.addr(TGT), b.mr.rkey())]);
    assert_eq!(
        summary(&poll_n(&world, &a, &a.cq, 1)),
        [(4, WcStatus::Success)]
    );
}
