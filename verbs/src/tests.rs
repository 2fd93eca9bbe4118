//! Unit tests: libibverbs numeric values and the QP transition table, table by table.

use crate::*;
use QpAttrMask as M;
use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
const ERR: QpState = QpState::Err;

const ALL_STATES: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, ERR];

/// Every single attribute bit (STATE excluded).
fn attr_bits() -> impl Iterator<Item = M> {
    (1..=20).map(|b| M::from_bits_retain(1 << b))
}

fn attr(next: QpState) -> QpAttr {
    QpAttr {
        qp_state: next,
        ..Default::default()
    }
}

/// The IB spec's table (chapter 11), written out independently of `transition_params`:
/// (from, to, RC required, RC optional, UD required, UD optional); `None` = not valid.
type Row = (QpState, QpState, Option<(M, M)>, Option<(M, M)>);

fn spec_table() -> Vec<Row> {
    let e = M::empty();
    let rc_rtr_req =
        M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    let rc_rts_req = M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    let rc_rts_opt =
        M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE;
    let ud_rts_opt = M::CUR_STATE | M::QKEY;
    let rc_sqd_sqd = M::PORT
        | M::AV
        | M::TIMEOUT
        | M::RETRY_CNT
        | M::RNR_RETRY
        | M::MAX_QP_RD_ATOMIC
        | M::MAX_DEST_RD_ATOMIC
        | M::ALT_PATH
        | M::ACCESS_FLAGS
        | M::PKEY_INDEX
        | M::MIN_RNR_TIMER
        | M::PATH_MIG_STATE;
    vec![
        (
            Reset,
            Init,
            Some((M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, e)),
            Some((M::PKEY_INDEX | M::PORT | M::QKEY, e)),
        ),
        (
            Init,
            Init,
            Some((e, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)),
            Some((e, M::PKEY_INDEX | M::PORT | M::QKEY)),
        ),
        (
            Init,
            Rtr,
            Some((rc_rtr_req, M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX)),
            Some((e, M::PKEY_INDEX | M::QKEY)),
        ),
        (
            Rtr,
            Rts,
            Some((rc_rts_req, rc_rts_opt)),
            Some((M::SQ_PSN, ud_rts_opt)),
        ),
        (
            Rts,
            Rts,
            Some((
                e,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
            )),
            Some((e, ud_rts_opt)),
        ),
        (
            Rts,
            Sqd,
            Some((e, M::EN_SQD_ASYNC_NOTIFY)),
            Some((e, M::EN_SQD_ASYNC_NOTIFY)),
        ),
        (
            Sqd,
            Rts,
            Some((
                e,
                M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
            )),
            Some((e, ud_rts_opt)),
        ),
        (
            Sqd,
            Sqd,
            Some((e, rc_sqd_sqd)),
            Some((e, M::PKEY_INDEX | M::QKEY)),
        ),
        (Sqe, Rts, None, Some((e, ud_rts_opt))),
    ]
}

fn expected(t: QpType, from: QpState, to: QpState) -> Option<(M, M)> {
    if t == QpType::Srd {
        return expected_srd(from, to);
    }
    if to == Reset || to == ERR {
        return Some((M::empty(), M::empty()));
    }
    spec_table()
        .into_iter()
        .find(|r| r.0 == from && r.1 == to)
        .and_then(|r| if t == QpType::Rc { r.2 } else { r.3 })
}

/// The Linux EFA driver's SRD table, written out as it is (not derived from the UD column):
/// (from, to, required, optional).
fn expected_srd(from: QpState, to: QpState) -> Option<(M, M)> {
    let e = M::empty();
    let rts_opt = M::CUR_STATE | M::QKEY;
    let rows = [
        (Reset, Reset, e, e),
        (Reset, Init, M::PKEY_INDEX | M::PORT | M::QKEY, e),
        (Init, Reset, e, e),
        (Init, ERR, e, e),
        (Init, Init, e, M::PKEY_INDEX | M::PORT | M::QKEY),
        (Init, Rtr, e, M::PKEY_INDEX | M::QKEY),
        (Rtr, Reset, e, e),
        (Rtr, ERR, e, e),
        (Rtr, Rts, M::SQ_PSN, M::CUR_STATE | M::QKEY | M::RNR_RETRY),
        (Rts, Reset, e, e),
        (Rts, ERR, e, e),
        (Rts, Rts, e, rts_opt),
        (Rts, Sqd, e, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Reset, e, e),
        (Sqd, ERR, e, e),
        (Sqd, Rts, e, rts_opt),
        (Sqd, Sqd, e, M::PKEY_INDEX | M::QKEY),
        (Sqe, Reset, e, e),
        (Sqe, ERR, e, e),
        (Sqe, Rts, e, rts_opt),
        (ERR, Reset, e, e),
        (ERR, ERR, e, e),
    ];
    rows.into_iter()
        .find(|r| r.0 == from && r.1 == to)
        .map(|r| (r.2, r.3))
}

/// The effective "from" state of a request: with CUR_STATE in the mask it is the attribute.
fn check(t: QpType, from: QpState, to: QpState, mask: M) -> Result<QpState, Error> {
    let a = QpAttr {
        qp_state: to,
        cur_qp_state: from,
        ..Default::default()
    };
    let base = if mask.contains(M::CUR_STATE) {
        Reset
    } else {
        from
    };
    check_modify(t, base, &a, mask | M::STATE)
}

#[test]
fn every_transition_of_the_table_for_rc_ud_and_srd() {
    // GSI (QP1) follows the UD column; SRD the EFA driver's table.
    for t in [QpType::Rc, QpType::Ud, QpType::Gsi, QpType::Srd] {
        for from in ALL_STATES {
            for to in ALL_STATES {
                let exp = expected(t, from, to);
                // What the library says agrees with the written table.
                assert_eq!(
                    transition_params(t, from, to).map(|p| (p.required, p.optional)),
                    exp,
                    "{t:?} {from:?}->{to:?}"
                );
                let Some((req, opt)) = exp else {
                    assert_eq!(
                        check_modify(t, from, &attr(to), M::STATE | M::all()),
                        Err(Error::InvalidArgument)
                    );
                    assert_eq!(
                        check_modify(t, from, &attr(to), M::STATE),
                        Err(Error::InvalidArgument),
                        "{t:?} {from:?}->{to:?} must not exist"
                    );
                    continue;
                };
                let plain = req.difference(M::CUR_STATE);
                // Exactly the required attributes: fine.
                assert_eq!(check(t, from, to, plain), Ok(to), "{t:?} {from:?}->{to:?}");
                // With every optional one too.
                let cur_ok = matches!(from, Rtr | Rts | Sqd | Sqe);
                let full = if cur_ok {
                    plain | opt
                } else {
                    plain | opt.difference(M::CUR_STATE)
                };
                assert_eq!(check(t, from, to, full), Ok(to), "{t:?} {from:?}->{to:?}");
                for bit in attr_bits() {
                    let r = check(t, from, to, plain | bit);
                    if req.contains(bit) {
                        // Dropping a required attribute is refused.
                        assert_eq!(
                            check(t, from, to, plain.difference(bit)),
                            Err(Error::InvalidArgument),
                            "{t:?} {from:?}->{to:?} without {bit:?}"
                        );
                    } else if opt.contains(bit) && (bit != M::CUR_STATE || cur_ok) {
                        assert_eq!(r, Ok(to), "{t:?} {from:?}->{to:?} + {bit:?}");
                    } else {
                        assert_eq!(
                            r,
                            Err(Error::InvalidArgument),
                            "{t:?} {from:?}->{to:?} + {bit:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_brief_s_required_sets() {
    let a = |s| attr(s);
    let rc_init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    let ud_init = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
    assert_eq!(check_modify(QpType::Rc, Reset, &a(Init), rc_init), Ok(Init));
    assert_eq!(check_modify(QpType::Ud, Reset, &a(Init), ud_init), Ok(Init));
    assert!(check_modify(QpType::Ud, Reset, &a(Init), rc_init).is_err());
    assert!(check_modify(QpType::Rc, Reset, &a(Init), ud_init).is_err());
    assert_eq!(
        check_modify(QpType::Gsi, Reset, &a(Init), ud_init),
        Ok(Init)
    );
    assert!(check_modify(QpType::Gsi, Reset, &a(Init), rc_init).is_err());
    let rc_rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    assert_eq!(check_modify(QpType::Rc, Init, &a(Rtr), rc_rtr), Ok(Rtr));
    assert_eq!(check_modify(QpType::Ud, Init, &a(Rtr), M::STATE), Ok(Rtr));
    let rc_rts =
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    assert_eq!(check_modify(QpType::Rc, Rtr, &a(Rts), rc_rts), Ok(Rts));
    assert_eq!(
        check_modify(QpType::Ud, Rtr, &a(Rts), M::STATE | M::SQ_PSN),
        Ok(Rts)
    );
    assert!(check_modify(QpType::Ud, Rtr, &a(Rts), M::STATE).is_err());
    // Skipping a state is refused.
    assert!(check_modify(QpType::Rc, Reset, &a(Rtr), rc_rtr).is_err());
    assert!(check_modify(QpType::Rc, Init, &a(Rts), rc_rts).is_err());
}

#[test]
fn srd_moves_to_rts_as_efa_does() {
    let a = |s| attr(s);
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
    let t = QpType::Srd;
    assert_eq!(check_modify(t, Reset, &a(Init), init), Ok(Init));
    // RC's attributes are not SRD's.
    assert_eq!(
        check_modify(
            t,
            Reset,
            &a(Init),
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
        ),
        Err(Error::InvalidArgument)
    );
    assert_eq!(check_modify(t, Init, &a(Rtr), M::STATE), Ok(Rtr));
    assert_eq!(
        check_modify(t, Init, &a(Rtr), M::STATE | M::AV | M::DEST_QPN),
        Err(Error::InvalidArgument)
    );
    assert_eq!(check_modify(t, Rtr, &a(Rts), M::STATE | M::SQ_PSN), Ok(Rts));
    assert_eq!(
        check_modify(t, Rtr, &a(Rts), M::STATE),
        Err(Error::InvalidArgument)
    );
    // The RNR retry count: SRD takes it on RTR -> RTS, UD does not, and SRD nowhere else.
    let rnr = M::STATE | M::SQ_PSN | M::RNR_RETRY;
    assert_eq!(check_modify(t, Rtr, &a(Rts), rnr), Ok(Rts));
    assert_eq!(
        check_modify(QpType::Ud, Rtr, &a(Rts), rnr),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        check_modify(t, Rts, &a(Rts), M::RNR_RETRY),
        Err(Error::InvalidArgument)
    );
    // RESET -> ERR is not in EFA's SRD table; from INIT on, ERR is always allowed.
    assert_eq!(
        check_modify(t, Reset, &a(ERR), M::STATE),
        Err(Error::InvalidArgument)
    );
    assert_eq!(check_modify(QpType::Ud, Reset, &a(ERR), M::STATE), Ok(ERR));
    for from in [Init, Rtr, Rts, Sqd, Sqe, ERR] {
        assert_eq!(
            check_modify(t, from, &a(ERR), M::STATE),
            Ok(ERR),
            "{from:?}"
        );
    }
    // SQE -> RTS exists for SRD (a send error leaves the QP usable, as UD).
    assert_eq!(check_modify(t, Sqe, &a(Rts), M::STATE | M::QKEY), Ok(Rts));
}

#[test]
fn reset_and_error_from_anywhere_take_no_attributes() {
    for t in [QpType::Rc, QpType::Ud] {
        for from in ALL_STATES {
            for to in [Reset, ERR] {
                assert_eq!(check_modify(t, from, &attr(to), M::STATE), Ok(to));
                assert_eq!(
                    check_modify(t, from, &attr(to), M::STATE | M::QKEY),
                    Err(Error::InvalidArgument)
                );
            }
        }
    }
}

#[test]
fn without_state_the_qp_stays_and_only_same_state_modifies_exist() {
    let a = attr(Reset); // ignored without STATE
    assert_eq!(check_modify(QpType::Rc, Rts, &a, M::MIN_RNR_TIMER), Ok(Rts));
    assert_eq!(check_modify(QpType::Ud, Rts, &a, M::QKEY), Ok(Rts));
    assert_eq!(
        check_modify(QpType::Rc, Rts, &a, M::SQ_PSN),
        Err(Error::InvalidArgument)
    );
    // RTR -> RTR does not exist.
    assert_eq!(
        check_modify(QpType::Rc, Rtr, &a, M::empty()),
        Err(Error::InvalidArgument)
    );
    assert_eq!(check_modify(QpType::Rc, Reset, &a, M::empty()), Ok(Reset));
}

#[test]
fn cur_state_is_a_hint_from_rtr_rts_sqd_sqe_only() {
    let mut a = attr(Rts);
    a.cur_qp_state = Rtr;
    // The QP believes it is in INIT; CUR_STATE says RTR: the RTR -> RTS row applies.
    assert_eq!(
        check_modify(QpType::Ud, Init, &a, M::STATE | M::CUR_STATE | M::SQ_PSN),
        Ok(Rts)
    );
    a.cur_qp_state = Init;
    assert_eq!(
        check_modify(QpType::Ud, Init, &a, M::STATE | M::CUR_STATE),
        Err(Error::InvalidArgument)
    );
    a.cur_qp_state = Sqe;
    assert_eq!(
        check_modify(QpType::Ud, Rts, &a, M::STATE | M::CUR_STATE),
        Ok(Rts)
    );
    assert_eq!(
        check_modify(QpType::Rc, Rts, &a, M::STATE | M::CUR_STATE),
        Err(Error::InvalidArgument)
    );
}

#[test]
fn libibverbs_numeric_values() {
    use WcStatus as S;
    let statuses = [
        (S::Success, 0),
        (S::LocLenErr, 1),
        (S::LocQpOpErr, 2),
        (S::LocEecOpErr, 3),
        (S::LocProtErr, 4),
        (S::WrFlushErr, 5),
        (S::MwBindErr, 6),
        (S::BadRespErr, 7),
        (S::LocAccessErr, 8),
        (S::RemInvReqErr, 9),
        (S::RemAccessErr, 10),
        (S::RemOpErr, 11),
        (S::RetryExcErr, 12),
        (S::RnrRetryExcErr, 13),
        (S::LocRddViolErr, 14),
        (S::RemInvRdReqErr, 15),
        (S::RemAbortErr, 16),
        (S::InvEecnErr, 17),
        (S::InvEecStateErr, 18),
        (S::FatalErr, 19),
        (S::RespTimeoutErr, 20),
        (S::GeneralErr, 21),
    ];
    for (s, v) in statuses {
        assert_eq!(s as u8, v, "{s:?}");
    }
    use WcOpcode as O;
    for (o, v) in [
        (O::Send, 0u8),
        (O::RdmaWrite, 1),
        (O::RdmaRead, 2),
        (O::CompSwap, 3),
        (O::FetchAdd, 4),
        (O::Recv, 128),
        (O::RecvRdmaWithImm, 129),
    ] {
        assert_eq!(o as u8, v, "{o:?}");
    }
    use WrOpcode as W;
    for (o, v) in [
        (W::RdmaWrite, 0u8),
        (W::RdmaWriteWithImm, 1),
        (W::Send, 2),
        (W::SendWithImm, 3),
        (W::RdmaRead, 4),
        (W::AtomicCmpAndSwp, 5),
        (W::AtomicFetchAndAdd, 6),
        (W::SendWithInv, 7),
    ] {
        assert_eq!(o as u8, v, "{o:?}");
    }
    assert_eq!(AccessFlags::LOCAL_WRITE.bits(), 1);
    assert_eq!(AccessFlags::REMOTE_WRITE.bits(), 2);
    assert_eq!(AccessFlags::REMOTE_READ.bits(), 4);
    assert_eq!(AccessFlags::REMOTE_ATOMIC.bits(), 8);
    assert_eq!(SendFlags::FENCE.bits(), 1);
    assert_eq!(SendFlags::SIGNALED.bits(), 2);
    assert_eq!(SendFlags::SOLICITED.bits(), 4);
    assert_eq!(SendFlags::INLINE.bits(), 8);
    assert_eq!(WcFlags::GRH.bits(), 1);
    assert_eq!(WcFlags::WITH_IMM.bits(), 2);
    assert_eq!(M::STATE.bits(), 1);
    assert_eq!(M::AV.bits(), 1 << 7);
    assert_eq!(M::MIN_RNR_TIMER.bits(), 1 << 15);
    assert_eq!(M::DEST_QPN.bits(), 1 << 20);
    assert_eq!(M::all().bits(), (1 << 21) - 1);
    assert_eq!((QpType::Rc as u8, QpType::Ud as u8), (2, 4));
    // SRD is libibverbs' IBV_QPT_DRIVER.
    assert_eq!(QpType::Srd as u8, 0xff);
    assert_eq!(
        (
            AtomicCap::None as u8,
            AtomicCap::Hca as u8,
            AtomicCap::Glob as u8
        ),
        (0, 1, 2)
    );
    assert_eq!((Reset as u8, ERR as u8, Sqe as u8), (0, 6, 5));
    assert_eq!((Mtu::Mtu256 as u8, Mtu::Mtu4096 as u8), (1, 5));
    assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    assert_eq!(AsyncEventType::PortActive as u8, 9);
    assert_eq!(AsyncEventType::QpLastWqeReached as u8, 16);
    assert_eq!(LinkLayer::Ethernet as u8, 2);
    assert_eq!(PortState::Active as u8, 4);
}

#[test]
fn errno_values() {
    for (e, n) in [
        (Error::InvalidArgument, 22),
        (Error::NoMemory, 12),
        (Error::Again, 11),
        (Error::Busy, 16),
        (Error::Io, 5),
        (Error::TimedOut, 110),
        (Error::NotSupported, 95),
        (Error::NoDevice, 19),
        (Error::Device(DeviceFailure::new(0x500, 0x01, 0x1234)), 5),
    ] {
        assert_eq!(e.errno(), n);
    }
}

#[test]
fn a_device_failure_keeps_and_shows_its_command_status_and_syndrome() {
    let d = DeviceFailure::new(0x0500, 0x01, 0x00c0_ffee);
    let e = Error::Device(d);
    let Error::Device(got) = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (got.opcode, got.status, got.syndrome),
        (0x500, 1, 0xc0_ffee)
    );
    assert_eq!(
        e.to_string(),
        "device command 0x0500 failed with status 0x01, syndrome 0x00c0ffee (errno 5)"
    );
    // Two failures differ by any of the three.
    assert_ne!(e, Error::Device(DeviceFailure::new(0x0500, 0x01, 0)));
    assert_ne!(e, Error::Io);
    assert_eq!(Error::Busy.to_string(), "Busy (errno 16)");
    // Copy, and small enough to return in registers with an index (PostError).
    let copy = e;
    assert_eq!(copy, e);
    assert!(core::mem::size_of::<Error>() <= 12);
}

#[test]
fn fw_version_text_round_trips() {
    use core::fmt::Write;
    let v = FwVersion::new("16.35.2000").unwrap();
    assert_eq!(v.as_str(), "16.35.2000");
    assert_eq!(v, "16.35.2000");
    assert_eq!(v.to_string(), "16.35.2000");
    assert_eq!(format!("{v:?}"), "FwVersion(\"16.35.2000\")");
    let c = v.to_c_bytes();
    assert_eq!(&c[..10], b"16.35.2000");
    assert!(c[10..].iter().all(|&b| b == 0));
    // Formatting into it gives the same value as building from the text.
    let mut w = FwVersion::default();
    assert!(w.is_empty());
    write!(w, "{}.{}.{:04}", 16, 35, 2000).unwrap();
    assert_eq!(w, v);
    // The longest text that fits a char[64] with its NUL; one byte more is refused, whole.
    let max = "x".repeat(FwVersion::CAPACITY);
    let full = FwVersion::new(&max).unwrap();
    assert_eq!(full.as_str(), max);
    assert_eq!(full.to_c_bytes()[63], 0);
    assert_eq!(FwVersion::new(&"x".repeat(64)), Err(Error::InvalidArgument));
    let mut w2 = FwVersion::new("1.2").unwrap();
    assert!(write!(w2, "{}", "y".repeat(62)).is_err());
    assert_eq!(w2, "1.2");
    // Multi-byte text stays whole.
    let u = FwVersion::new("fw-\u{e9}t\u{e9}").unwrap();
    assert_eq!(u.as_str(), "fw-\u{e9}t\u{e9}");
    // A NUL would cut the C string short.
    assert_eq!(FwVersion::new("1\0"), Err(Error::InvalidArgument));
    // Equality looks at the text only.
    assert_ne!(
        FwVersion::new("1.2").unwrap(),
        FwVersion::new("1.20").unwrap()
    );
    assert_eq!(DeviceAttr::default().fw_ver.as_str(), "");
}

#[test]
fn a_send_work_request_names_a_destination_and_remote_memory_independently() {
    struct Ah(u32);
    let ah = Ah(9);
    let sge = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 3,
    }];
    // An SRD RDMA write: both parts.
    let wr = SendWr {
        opcode: WrOpcode::RdmaWrite,
        sg_list: &sge,
        remote: RemoteOp::Rdma {
            remote_addr: 0x8000,
            rkey: 0x77,
        },
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 0x12,
            remote_qkey: 0x1111_1111,
        }),
        ..SendWr::default()
    };
    let copy = wr;
    let d = copy.dest.unwrap();
    assert_eq!(
        (d.ah.0, d.remote_qpn, d.remote_qkey),
        (9, 0x12, 0x1111_1111)
    );
    assert_eq!(
        copy.remote,
        RemoteOp::Rdma {
            remote_addr: 0x8000,
            rkey: 0x77
        }
    );
    // RC: no destination.
    let rc: SendWr<'_, Ah> = SendWr {
        remote: RemoteOp::Rdma {
            remote_addr: 1,
            rkey: 2,
        },
        ..SendWr::default()
    };
    assert!(rc.dest.is_none());
}

#[test]
fn gid_and_mtu_helpers() {
    let g = Gid::from_ipv4([10, 0, 0, 1]);
    assert_eq!(g.ipv4(), Some([10, 0, 0, 1]));
    assert!(!g.is_zero());
    assert_eq!(Gid([0xfe; 16]).ipv4(), None);
    assert!(Gid::default().is_zero());
    assert_eq!(Mtu::for_ethernet(1500), Some(Mtu::Mtu1024));
    assert_eq!(Mtu::for_ethernet(4200), Some(Mtu::Mtu4096));
    assert_eq!(Mtu::for_ethernet(9000), Some(Mtu::Mtu4096));
    assert_eq!(Mtu::for_ethernet(2200), Some(Mtu::Mtu2048));
    assert_eq!(Mtu::for_ethernet(100), None);
}

#[test]
fn flags_debug_and_ops() {
    let f = SendFlags::SIGNALED | SendFlags::INLINE;
    assert!(f.contains(SendFlags::SIGNALED));
    assert!(!f.contains(SendFlags::FENCE));
    assert_eq!(format!("{f:?}"), "SendFlags(SIGNALED | INLINE)");
    assert_eq!(
        format!("{:?}", WcFlags::from_bits_retain(0x101)),
        "WcFlags(GRH | 0x100)"
    );
    let wr: SendWr<'_, ()> = SendWr::default();
    assert_eq!(wr.opcode, WrOpcode::Send);
    assert!(matches!(wr.remote, RemoteOp::None));
    assert!(wr.dest.is_none());
}

// ------------------------------------------------------------------ RC bring-up helper

fn rc_params() -> rc::RcParams {
    rc::RcParams {
        port_num: 1,
        pkey_index: 3,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4([10, 0, 0, 2]),
            is_global: true,
            hop_limit: 64,
            port_num: 1,
            dmac: [2, 0, 0, 0, 0, 2],
            ..AhAttr::default()
        },
        path_mtu: Mtu::Mtu2048,
        dest_qp_num: 0x12_3456,
        rq_psn: 0x11,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 5,
        sq_psn: 0x22,
        timeout: 9,
        retry_cnt: 6,
        rnr_retry: 3,
        max_rd_atomic: 2,
    }
}

#[test]
fn rc_attrs_pass_the_transition_table() {
    let p = rc_params();
    let steps = [
        (Reset, p.init_attr(), Init),
        (Init, p.rtr_attr(), Rtr),
        (Rtr, p.rts_attr(), Rts),
    ];
    for (from, (a, m), to) in steps {
        assert_eq!(a.qp_state, to);
        assert_eq!(
            check_modify(QpType::Rc, from, &a, m),
            Ok(to),
            "{from:?} -> {to:?}"
        );
        // the required attributes, plus the access flags restated at RTR
        let need = transition_params(QpType::Rc, from, to).unwrap().required | M::STATE;
        let extra = if to == Rtr {
            M::ACCESS_FLAGS
        } else {
            M::empty()
        };
        assert_eq!(m, need | extra, "{from:?} -> {to:?}");
        // and not from any other state (but INIT -> INIT, which takes the same attributes)
        for other in ALL_STATES.into_iter().filter(|&s| s != from && s != to) {
            assert!(
                check_modify(QpType::Rc, other, &a, m).is_err(),
                "{other:?} -> {to:?}"
            );
        }
    }
}

#[test]
fn rc_attrs_carry_the_params() {
    let p = rc_params();
    let (i, _) = p.init_attr();
    assert_eq!(
        (i.port_num, i.pkey_index, i.qp_access_flags),
        (1, 3, p.access)
    );
    let (r, _) = p.rtr_attr();
    assert_eq!(r.ah_attr, p.ah_attr);
    assert_eq!(r.path_mtu, Mtu::Mtu2048);
    assert_eq!((r.dest_qp_num, r.rq_psn), (0x12_3456, 0x11));
    assert_eq!((r.max_dest_rd_atomic, r.min_rnr_timer), (4, 5));
    assert_eq!(r.qp_access_flags, p.access);
    let (s, _) = p.rts_attr();
    assert_eq!(
        (s.sq_psn, s.timeout, s.retry_cnt, s.rnr_retry),
        (0x22, 9, 6, 3)
    );
    assert_eq!(s.max_rd_atomic, 2);
}

#[test]
fn rc_params_defaults() {
    let d = rc::RcParams::default();
    assert_eq!((d.port_num, d.ah_attr.port_num, d.pkey_index), (1, 1, 0));
    assert_eq!(d.path_mtu, Mtu::Mtu1024);
    assert_eq!(
        (d.timeout, d.retry_cnt, d.rnr_retry, d.min_rnr_timer),
        (14, 7, 7, 12)
    );
    assert!(d.access.is_empty());
}
