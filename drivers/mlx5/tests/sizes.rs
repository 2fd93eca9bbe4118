//! Object sizes from the whole `u32` range: `create_qp` (every field of `QpCap`, RC, UD and
//! GSI, with and without an SRQ), `create_srq` (every field of `SrqAttr`) and `create_cq`
//! (`cqe`) through the verbs provider against the fake device. Whatever the sizes, the
//! provider never panics (in release builds no arithmetic wraps either): it either creates the
//! object with at least what was asked for, or refuses with EINVAL / ENOMEM, leaving nothing
//! behind.

use mlx5::fake::{Bench, Dev, bench};
use proptest::prelude::*;
use verbs::{
    CompletionQueue, Provider, QpCap, QpInitAttr, QpType, QueuePair, SharedReceiveQueue, SrqAttr,
};

/// A size: small values, powers of two and their neighbours, values near `u32::MAX`, and
/// anything at all.
fn size() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..=80,
        (0u32..32).prop_map(|k| 1u32 << k),
        (0u32..32, -2i64..=2).prop_map(|(k, d)| ((1i64 << k) + d).clamp(0, u32::MAX as i64) as u32),
        (0u32..=16).prop_map(|k| u32::MAX - k),
        any::<u32>(),
    ]
}

/// Sizes that the fake device can satisfy more often (to exercise the `Ok` side too).
fn small() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0u32..=80, 1 => size()]
}

fn refused(e: verbs::Error) -> Result<(), TestCaseError> {
    prop_assert!(
        matches!(e, verbs::Error::InvalidArgument | verbs::Error::NoMemory),
        "unexpected error {:?}",
        e
    );
    Ok(())
}

fn device() -> (Bench, Dev) {
    let b = bench();
    let dev = b.probe().expect("probe");
    (b, dev)
}

/// Tears the device down and checks that every DMA buffer was given back.
fn done(b: Bench, dev: Dev) -> Result<(), TestCaseError> {
    dev.shutdown().expect("shutdown");
    prop_assert_eq!(b.heap.live_buffers(), 0, "DMA memory left behind");
    Ok(())
}

fn cap_strategy(s: fn() -> BoxedStrategy<u32>) -> impl Strategy<Value = QpCap> {
    (s(), s(), s(), s(), s()).prop_map(|(a, b, c, d, e)| QpCap {
        max_send_wr: a,
        max_recv_wr: b,
        max_send_sge: c,
        max_recv_sge: d,
        max_inline_data: e,
    })
}

fn any_size() -> BoxedStrategy<u32> {
    size().boxed()
}

fn small_size() -> BoxedStrategy<u32> {
    small().boxed()
}

fn qp_type() -> impl Strategy<Value = QpType> {
    prop_oneof![Just(QpType::Rc), Just(QpType::Ud), Just(QpType::Gsi)]
}

/// One `create_qp` with `cap`; on an SRQ when `on_srq`.
fn check_qp(qp_type: QpType, cap: QpCap, on_srq: bool) -> Result<(), TestCaseError> {
    let (b, dev) = device();
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 16, 0, None).unwrap();
    let srq = on_srq.then(|| {
        let a = SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        };
        Provider::create_srq(&dev, &pd, &a).unwrap()
    });
    let init = QpInitAttr {
        qp_type,
        send_cq: &cq,
        recv_cq: &cq,
        srq: srq.as_ref(),
        cap,
        sq_sig_all: false,
    };
    match Provider::create_qp(&dev, &pd, &init) {
        Ok((qp, got)) => {
            prop_assert!(got.max_send_wr >= cap.max_send_wr, "{:?} < {:?}", got, cap);
            prop_assert!(
                got.max_send_sge >= cap.max_send_sge,
                "{:?} < {:?}",
                got,
                cap
            );
            prop_assert!(
                got.max_inline_data >= cap.max_inline_data,
                "{:?} < {:?}",
                got,
                cap
            );
            if !on_srq {
                prop_assert!(got.max_recv_wr >= cap.max_recv_wr, "{:?} < {:?}", got, cap);
                prop_assert!(
                    got.max_recv_sge >= cap.max_recv_sge,
                    "{:?} < {:?}",
                    got,
                    cap
                );
            }
            prop_assert_eq!(QueuePair::cap(&qp), got);
            Provider::destroy_qp(&dev, qp).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        }
        Err(e) => refused(e)?,
    }
    if let Some(s) = srq {
        Provider::destroy_srq(&dev, s).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    }
    Provider::destroy_cq(&dev, cq).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    Provider::dealloc_pd(&dev, pd).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    done(b, dev)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn create_qp_sizes_never_panic(
        t in qp_type(),
        cap in cap_strategy(any_size),
        on_srq in any::<bool>(),
    ) {
        check_qp(t, cap, on_srq && t != QpType::Gsi)?;
    }

    #[test]
    fn create_qp_small_sizes_are_met(
        t in qp_type(),
        cap in cap_strategy(small_size),
        on_srq in any::<bool>(),
    ) {
        check_qp(t, cap, on_srq && t != QpType::Gsi)?;
    }

    #[test]
    fn create_srq_sizes_never_panic(
        max_wr in prop_oneof![small(), size()],
        max_sge in prop_oneof![small(), size(), (20u32..32).prop_map(|k| 1u32 << k)],
        srq_limit in prop_oneof![small(), size()],
    ) {
        let (b, dev) = device();
        let pd = Provider::alloc_pd(&dev).unwrap();
        let want = SrqAttr { max_wr, max_sge, srq_limit };
        match Provider::create_srq(&dev, &pd, &want) {
            Ok(srq) => {
                let got = srq.attr();
                prop_assert!(got.max_wr >= max_wr, "{:?} < {:?}", got, want);
                prop_assert!(got.max_sge >= max_sge, "{:?} < {:?}", got, want);
                prop_assert_eq!(got.srq_limit, srq_limit);
                Provider::destroy_srq(&dev, srq)
                    .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            }
            Err(e) => refused(e)?,
        }
        Provider::dealloc_pd(&dev, pd).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        done(b, dev)?;
    }

    #[test]
    fn create_cq_sizes_never_panic(cqe in prop_oneof![size(), 0u32..=70_000]) {
        let (b, dev) = device();
        match Provider::create_cq(&dev, cqe, 7, None) {
            Ok(cq) => {
                prop_assert!(cq.cqe() >= cqe, "{} < {}", cq.cqe(), cqe);
                prop_assert_eq!(cq.cq_context(), 7);
                Provider::destroy_cq(&dev, cq)
                    .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            }
            Err(e) => refused(e)?,
        }
        done(b, dev)?;
    }
}

/// The sizes that broke the arithmetic before it was checked: overflowing products and sums,
/// and powers of two beyond `u32`.
#[test]
fn known_overflowing_sizes_are_einval() {
    let base = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for (what, cap) in [
        (
            "max_send_sge",
            QpCap {
                max_send_sge: 0x0fff_ffff,
                ..base
            },
        ),
        (
            "max_recv_sge",
            QpCap {
                max_recv_sge: 0x0800_0001,
                ..base
            },
        ),
        (
            "max_inline_data",
            QpCap {
                max_inline_data: u32::MAX - 4,
                ..base
            },
        ),
        (
            "max_send_wr",
            QpCap {
                max_send_wr: u32::MAX,
                ..base
            },
        ),
        (
            "max_recv_wr",
            QpCap {
                max_recv_wr: 0x8000_0001,
                ..base
            },
        ),
    ] {
        for t in [QpType::Rc, QpType::Ud] {
            let (b, dev) = device();
            let pd = Provider::alloc_pd(&dev).unwrap();
            let cq = Provider::create_cq(&dev, 16, 0, None).unwrap();
            let init = QpInitAttr {
                qp_type: t,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap,
                sq_sig_all: false,
            };
            assert_eq!(
                Provider::create_qp(&dev, &pd, &init).map(|(_, c)| c),
                Err(verbs::Error::InvalidArgument),
                "{what} {t:?}"
            );
            Provider::destroy_cq(&dev, cq).unwrap();
            Provider::dealloc_pd(&dev, pd).unwrap();
            dev.shutdown().unwrap();
            assert_eq!(b.heap.live_buffers(), 0);
        }
    }
    let (b, dev) = device();
    let pd = Provider::alloc_pd(&dev).unwrap();
    for attr in [
        SrqAttr {
            max_wr: 8,
            max_sge: 1 << 27,
            srq_limit: 0,
        },
        SrqAttr {
            max_wr: u32::MAX,
            max_sge: 1,
            srq_limit: 0,
        },
    ] {
        assert_eq!(
            Provider::create_srq(&dev, &pd, &attr).map(|s| s.attr()),
            Err(verbs::Error::InvalidArgument),
            "{attr:?}"
        );
    }
    assert_eq!(
        Provider::create_cq(&dev, u32::MAX, 0, None).map(|c| c.cqe()),
        Err(verbs::Error::InvalidArgument)
    );
    Provider::dealloc_pd(&dev, pd).unwrap();
    dev.shutdown().unwrap();
    assert_eq!(b.heap.live_buffers(), 0);
}
