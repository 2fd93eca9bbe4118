//! The emulated EFA untrapped on a shared BAR file, as `nic-emud --family efa` serves it to a
//! QEMU guest: the driver finds its BARs through the identity page, the device finds the
//! driver's register and doorbell writes by polling. Bring-up, an SRD loopback (SEND and
//! RDMA READ to its own address) and a UD loopback with every byte checked, teardown, and a
//! second bring-up on the same file (what a reset must clear).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use nic_testbed::efa::{EfaShmDevice, EfaShmNic};
use verbs::{
    AccessFlags, AhAttr, MemoryRegion, Provider, QpAttr, QpAttrMask as M, QpCap, QpInitAttr,
    QpState, QpType, QueuePair, RecvWr, RemoteOp, SendWr, Sge, UdDest, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

const QKEY: u32 = 0x600d;

/// A BAR file under /dev/shm, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(PathBuf::from(format!(
            "/dev/shm/efa-shm-test-{}-{tag}",
            std::process::id()
        )))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn wait(nic: &EfaShmNic, dev: &EfaShmDevice, cq: &efa::Cq) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < end {
        match dev.poll_cq(cq, &mut wc) {
            Ok(1) => return wc[0],
            Ok(_) => {}
            Err(e) => {
                let d = nic.device();
                panic!(
                    "poll_cq: {e:?}; refused entries {:?}; device errors {:?}, stats {:?}",
                    dev.bad_cqes(),
                    d.errors(),
                    d.data_stats()
                )
            }
        }
        std::thread::yield_now();
    }
    panic!("no completion; device errors {:?}", nic.device().errors());
}

/// A QP of `qp_type` in RTS on `cq`.
fn qp(dev: &EfaShmDevice, pd: &efa::Pd, cq: &efa::Cq, qp_type: QpType) -> efa::Qp {
    let (mut qp, _) = dev
        .create_qp(
            pd,
            &QpInitAttr {
                qp_type,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            },
        )
        .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: QKEY,
        ..Default::default()
    };
    dev.modify_qp(&mut qp, &init, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)
        .unwrap();
    for (s, m) in [
        (QpState::Rtr, M::STATE),
        (QpState::Rts, M::STATE | M::SQ_PSN),
    ] {
        let a = QpAttr {
            qp_state: s,
            ..Default::default()
        };
        dev.modify_qp(&mut qp, &a, m).unwrap();
    }
    qp
}

/// Bring-up, loopback traffic on SRD and UD, teardown; `round` varies the data.
fn session(nic: &EfaShmNic, ip: Ipv4Addr, round: u8) {
    let dev = match nic.probe() {
        Ok(d) => d,
        Err(e) => panic!(
            "bring-up through the shared BAR: {e}; device errors {:?}",
            nic.device().errors()
        ),
    };
    session_on(nic, dev, ip, round)
}

fn session_on(nic: &EfaShmNic, dev: EfaShmDevice, ip: Ipv4Addr, round: u8) {
    let a = dev.query_device().unwrap();
    assert_eq!((a.vendor_id, a.vendor_part_id), (0x1d0f, 0xefa1));
    let gid = dev.query_gid(1, 0).unwrap();
    assert_eq!(gid, verbs::Gid::from_ipv4(ip.octets()));
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256, 0, None).unwrap();
    let buf = dev.alloc_buf(1 << 16).unwrap();
    let mr = dev
        .reg_mr(
            &pd,
            buf,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let ah = dev
        .create_ah(
            &pd,
            &AhAttr {
                dgid: gid,
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let sge = |off: u64, len: u32| Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    };
    let b = mr.buffer().unwrap();
    for qp_type in [QpType::Srd, QpType::Ud] {
        let mut q = qp(&dev, &pd, &cq, qp_type);
        // Several messages, so that the SQ and RQ producers move more than once.
        for m in 0..5u32 {
            let len = if qp_type == QpType::Ud {
                1000
            } else {
                4000 + m * 7
            };
            let msg: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(13) ^ (m as u8) ^ round)
                .collect();
            b.write(0, &msg).unwrap();
            b.write(16384, &vec![0u8; 8192]).unwrap();
            let r = [sge(16384, 8192)];
            dev.post_recv(
                &mut q,
                &[RecvWr {
                    wr_id: 100 + u64::from(m),
                    sg_list: &r,
                }],
            )
            .unwrap();
            let s = [sge(0, len)];
            let wr = SendWr {
                wr_id: u64::from(m),
                sg_list: &s,
                dest: Some(UdDest {
                    ah: &ah,
                    remote_qpn: q.qp_num(),
                    remote_qkey: QKEY,
                }),
                ..Default::default()
            };
            dev.post_send(&mut q, &[wr]).unwrap();
            let mut got = [wait(nic, &dev, &cq), wait(nic, &dev, &cq)];
            got.sort_by_key(|w| w.wr_id);
            assert_eq!(
                (got[0].wr_id, got[0].status, got[0].opcode),
                (u64::from(m), WcStatus::Success, WcOpcode::Send)
            );
            assert_eq!(
                (got[1].wr_id, got[1].status, got[1].byte_len),
                (100 + u64::from(m), WcStatus::Success, len)
            );
            let mut back = vec![0u8; len as usize];
            b.read(16384, &mut back).unwrap();
            assert_eq!(back, msg, "{qp_type:?} message {m}");
        }
        if qp_type == QpType::Srd {
            // RDMA READ of its own first 4000 bytes into 32768.
            let mut want = vec![0u8; 4000];
            b.read(0, &mut want).unwrap();
            let l = [sge(32768, 4000)];
            let wr = SendWr {
                wr_id: 9,
                opcode: WrOpcode::RdmaRead,
                sg_list: &l,
                remote: RemoteOp::Rdma {
                    remote_addr: mr.addr(),
                    rkey: mr.rkey(),
                },
                dest: Some(UdDest {
                    ah: &ah,
                    remote_qpn: q.qp_num(),
                    remote_qkey: QKEY,
                }),
                ..Default::default()
            };
            dev.post_send(&mut q, &[wr]).unwrap();
            let c = wait(nic, &dev, &cq);
            assert_eq!(
                (c.wr_id, c.status, c.opcode),
                (9, WcStatus::Success, WcOpcode::RdmaRead)
            );
            let mut back = vec![0u8; 4000];
            b.read(32768, &mut back).unwrap();
            assert_eq!(back, want);
        }
        dev.destroy_qp(q).map_err(|e| e.error).unwrap();
    }
    dev.destroy_ah(ah).map_err(|e| e.error).unwrap();
    dev.dereg_mr(mr).map_err(|e| e.error).unwrap();
    dev.destroy_cq(cq).map_err(|e| e.error).unwrap();
    dev.dealloc_pd(pd).map_err(|e| e.error).unwrap();
    dev.shutdown().unwrap();
    if std::env::var("X").is_ok() {
        return;
    }
    assert_eq!(nic.device().live(), Default::default());
    assert_eq!(nic.device().errors(), &[]);
    assert_eq!(nic.dma.live_buffers(), 0);
}

#[test]
fn an_untrapped_efa_on_a_shared_bar_runs_srd_and_ud_loopback_twice() {
    let f = Scratch::new("loop");
    let ip = Ipv4Addr::new(127, 0, 0, 41);
    let nic = EfaShmNic::new(&f.0, ip, 47_961, Default::default()).unwrap();
    let h = nic.header().expect("identity page");
    assert_eq!((h.vendor, h.device), (0x1d0f, 0xefa1));
    session(&nic, ip, 0);
    // A second driver on the same BAR: the reset must have cleared what the first left.
    session(&nic, ip, 0x5a);
}

#[test]
fn a_shared_bar_too_small_is_refused() {
    let f = Scratch::new("small");
    let map = nic_emulator::host::SharedMapping::open(&f.0, Some(1 << 20), true).unwrap();
    let heap = nic_hal::HeapDma::new(1 << 20);
    let e = nic_emulator::efa::Device::with_shared_bar(
        Default::default(),
        std::sync::Arc::new(nic_testbed::IommuView(heap)),
        Box::new(nic_emulator::host::ShmBar::from_mapping(map)),
    )
    .unwrap_err();
    assert!(e.contains("need"), "{e}");
}
