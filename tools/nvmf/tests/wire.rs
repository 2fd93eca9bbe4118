//! Byte-exact encodings built from the field offsets, proptest round trips, and a target
//! fed arbitrary capsules.

mod common;

use common::*;
use nvmf::Status;
use nvmf::admin::{IdentifyController, IdentifyNamespace};
use nvmf::capsule::{Cqe, Sgl, Sqe};
use nvmf::discovery::{DiscoveryEntry, RdmaTsas};
use nvmf::fabrics::{Connect, ConnectData, PropertyGet, PropertySet};
use nvmf::host::HostQueueState;
use nvmf::io::{DsmRange, ReadWrite};
use nvmf::rdma::ConnectRequest;
use nvmf::target::Outcome;
use proptest::prelude::*;

/// The admin-queue Connect capsule a Linux host sends: fabrics opcode, PSDT 01b, FCTYPE 1,
/// keyed SGL with invalidate over the 1024-byte data, SQSIZE 31, KATO 5000 ms.
#[test]
fn linux_admin_connect_capsule() {
    let mut want = [0u8; 64];
    want[0] = 0x7F;
    want[1] = 0x40;
    want[2..4].copy_from_slice(&0x101Eu16.to_le_bytes());
    want[4] = 0x01;
    want[24..32].copy_from_slice(&0xffff_8881_0234_5000u64.to_le_bytes());
    want[32..35].copy_from_slice(&[0x00, 0x04, 0x00]); // 1024, 24 bits
    want[35..39].copy_from_slice(&0x0001_2345u32.to_le_bytes());
    want[39] = 0x4F;
    want[44] = 31;
    want[48..52].copy_from_slice(&5000u32.to_le_bytes());

    let mut sqe = Connect {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 5000,
    }
    .to_sqe();
    sqe.cid = 0x101E;
    sqe.sgl = Sgl::Keyed {
        addr: 0xffff_8881_0234_5000,
        len: 1024,
        key: 0x0001_2345,
        invalidate: true,
    };
    assert_eq!(sqe.encode(), want);
    let back = Sqe::decode(&want).unwrap();
    assert_eq!(back, sqe);
    assert!(back.is_write());
    assert_eq!(Connect::from_sqe(&back).kato, 5000);

    let mut data = [0u8; 1024];
    data[..16].copy_from_slice(b"host-id-01234567");
    data[16..18].copy_from_slice(&[0xFF, 0xFF]);
    data[256..256 + SUBNQN.len()].copy_from_slice(SUBNQN.as_bytes());
    data[512..512 + HOSTNQN.len()].copy_from_slice(HOSTNQN.as_bytes());
    let cd = ConnectData {
        hostid: *b"host-id-01234567",
        cntlid: 0xFFFF,
        subnqn: SUBNQN.into(),
        hostnqn: HOSTNQN.into(),
    };
    assert_eq!(cd.encode(), data);
    assert_eq!(ConnectData::decode(&data).unwrap(), cd);
}

/// An I/O-queue Connect with its data in the capsule (SGL type 0x01, offset 0).
#[test]
fn io_connect_in_capsule() {
    let mut sqe = Connect {
        recfmt: 0,
        qid: 3,
        sqsize: 127,
        cattr: 0x04,
        kato: 0,
    }
    .to_sqe();
    sqe.sgl = Sgl::InCapsule {
        offset: 0,
        len: 1024,
    };
    let b = sqe.encode();
    assert_eq!(
        &b[24..40],
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0x01]
    );
    assert_eq!(&b[40..48], &[0, 0, 3, 0, 127, 0, 4, 0]);
}

#[test]
fn null_sgl_and_property_commands() {
    let b = PropertyGet {
        size8: true,
        offset: 0,
    }
    .to_sqe()
    .encode();
    assert_eq!((b[0], b[1], b[4], b[40]), (0x7F, 0x40, 0x04, 1));
    assert_eq!(
        &b[24..40],
        &[0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40]
    );
    let b = PropertySet {
        size8: false,
        offset: 0x14,
        value: 0x0046_0001,
    }
    .to_sqe()
    .encode();
    assert_eq!((b[4], b[40], b[44]), (0x00, 0, 0x14));
    assert_eq!(&b[48..56], &[0x01, 0, 0x46, 0, 0, 0, 0, 0]);
}

#[test]
fn completion_bytes() {
    // Connect success: CNTLID 1 in DW0, SQHD 1, SQID 0, CID 0x101E, status 0.
    let c = Cqe {
        result: 1,
        sqhd: 1,
        sqid: 0,
        cid: 0x101E,
        status: Status::SUCCESS,
        phase: false,
    };
    assert_eq!(
        c.encode(),
        [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x1E, 0x10, 0, 0]
    );
    // LBA Out of Range with DNR on the wire: (0x4080 << 1) = 0x8100.
    let c = Cqe {
        status: Status::LBA_RANGE.dnr(),
        ..Default::default()
    };
    assert_eq!(&c.encode()[14..], &[0x00, 0x81]);
}

#[test]
fn read_write_fields() {
    let rw = ReadWrite {
        nsid: 1,
        slba: 0x1_0000_0002,
        nlb: 7,
        control: 0x4000,
        dsmgmt: 0,
        reftag: 0,
        apptag: 0,
        appmask: 0,
    };
    let b = rw.to_sqe(0x02).encode();
    assert_eq!(&b[40..52], &[2, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0x40]);
    let r = DsmRange {
        cattr: 0,
        nlb: 8,
        slba: 0x20,
    };
    assert_eq!(
        r.encode(),
        [0, 0, 0, 0, 8, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0]
    );
}

/// A discovery log entry for an RDMA port, byte by byte.
#[test]
fn discovery_entry_bytes() {
    let e = DiscoveryEntry {
        trtype: 1,
        adrfam: 1,
        subtype: 2,
        treq: 0x04,
        portid: 1,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: "4420".into(),
        subnqn: SUBNQN.into(),
        traddr: "10.0.0.2".into(),
        tsas: RdmaTsas::DEFAULT,
    };
    let b = e.encode();
    assert_eq!(&b[..12], &[1, 1, 2, 4, 1, 0, 0xFF, 0xFF, 32, 0, 0, 0]);
    assert_eq!(&b[32..36], b"4420");
    assert!(b[36..64].iter().all(|&c| c == b' '));
    assert_eq!(&b[256..256 + SUBNQN.len()], SUBNQN.as_bytes());
    assert_eq!(b[256 + SUBNQN.len()], 0);
    assert_eq!(&b[512..520], b"10.0.0.2");
    assert!(b[520..768].iter().all(|&c| c == b' '));
    assert_eq!(&b[768..771], &[1, 1, 1]);
    assert_eq!(DiscoveryEntry::decode(&b).unwrap(), e);
}

#[test]
fn identify_offsets() {
    let id = IdentifyController {
        cntlid: 0x1234,
        kas: 10,
        maxcmd: 128,
        sgls: 0x0010_0005,
        ioccsz: 260,
        subnqn: SUBNQN.into(),
        sn: "SN".into(),
        ..Default::default()
    };
    let b = id.encode();
    assert_eq!(&b[78..80], &[0x34, 0x12]);
    assert_eq!(&b[320..322], &[10, 0]);
    assert_eq!(&b[514..516], &[128, 0]);
    assert_eq!(&b[536..540], &[5, 0, 0x10, 0]);
    assert_eq!(&b[1792..1796], &[4, 1, 0, 0]);
    assert_eq!(&b[4..8], b"SN  ");
    assert_eq!(&b[768..768 + SUBNQN.len()], SUBNQN.as_bytes());
    let ns = IdentifyNamespace {
        nsze: 2048,
        ncap: 2048,
        lbads: 9,
        ..Default::default()
    };
    let b = ns.encode();
    assert_eq!((b[0], b[1], b[9], b[130]), (0, 8, 8, 9));
}

#[test]
fn host_connect_request_private_data() {
    let st = HostQueueState::new(2, 128);
    assert_eq!(
        &st.connect_request().encode()[..10],
        &[0, 0, 2, 0, 128, 0, 127, 0, 0, 0]
    );
}

fn arb_sgl() -> impl Strategy<Value = Sgl> {
    prop_oneof![
        (any::<u64>(), 0u32..=0xFF_FFFF, any::<u32>(), any::<bool>()).prop_map(
            |(addr, len, key, invalidate)| Sgl::Keyed {
                addr,
                len,
                key,
                invalidate
            }
        ),
        (any::<u64>(), any::<u32>()).prop_map(|(offset, len)| Sgl::InCapsule { offset, len }),
    ]
}

fn nqn() -> impl Strategy<Value = String> {
    "nqn\\.[a-z0-9.:-]{1,200}"
}

proptest! {
    #[test]
    fn sqe_bytes_round_trip(b in proptest::collection::vec(any::<u8>(), 64)) {
        let sqe = Sqe::decode(&b).unwrap();
        let mut want = b.clone();
        // A data-block descriptor's reserved bytes are ignored (and encode as zero).
        if want[39] == 0x01 {
            want[36..39].fill(0);
        }
        prop_assert_eq!(&sqe.encode()[..], &want[..]);
    }

    /// Linux's host leaves the reserved bytes of an in-capsule descriptor as the previous
    /// command in the same slot left them (the key of a keyed descriptor): they are ignored.
    #[test]
    fn in_capsule_descriptor_ignores_reserved_bytes(off in any::<u64>(), len in any::<u32>(),
                                                    rsvd in any::<[u8; 3]>()) {
        let mut b = Sgl::InCapsule { offset: off, len }.encode();
        b[12..15].copy_from_slice(&rsvd);
        prop_assert_eq!(Sgl::decode(&b), Sgl::InCapsule { offset: off, len });
    }

    #[test]
    fn cqe_bytes_round_trip(b in proptest::collection::vec(any::<u8>(), 16)) {
        let cqe = Cqe::decode(&b).unwrap();
        prop_assert_eq!(&cqe.encode()[..], &b[..]);
    }

    #[test]
    fn sgl_round_trip(s in arb_sgl()) {
        prop_assert_eq!(Sgl::decode(&s.encode()), s);
    }

    #[test]
    fn connect_round_trip(qid in any::<u16>(), sqsize in any::<u16>(), cattr in any::<u8>(),
                          kato in any::<u32>(), cntlid in any::<u16>(),
                          hostid in any::<[u8; 16]>(), sub in nqn(), host in nqn()) {
        let c = Connect { recfmt: 0, qid, sqsize, cattr, kato };
        prop_assert_eq!(Connect::from_sqe(&Sqe::decode(&c.to_sqe().encode()).unwrap()), c);
        let d = ConnectData { hostid, cntlid, subnqn: sub, hostnqn: host };
        prop_assert_eq!(ConnectData::decode(&d.encode()).unwrap(), d);
    }

    #[test]
    fn private_data_round_trip(qid in any::<u16>(), hrq in any::<u16>(), hsq in any::<u16>(),
                               cntlid in any::<u16>()) {
        let r = ConnectRequest { recfmt: 0, qid, hrqsize: hrq, hsqsize: hsq, cntlid };
        prop_assert_eq!(ConnectRequest::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn discovery_entry_round_trip(trtype in any::<u8>(), adrfam in any::<u8>(), st in any::<u8>(),
                                  treq in any::<u8>(), portid in any::<u16>(), asqsz in any::<u16>(),
                                  svc in "[0-9]{1,5}", addr in "[0-9a-f.:]{1,40}", sub in nqn()) {
        let e = DiscoveryEntry {
            trtype, adrfam, subtype: st, treq, portid, cntlid: 0xFFFF, asqsz, eflags: 0,
            trsvcid: svc, subnqn: sub, traddr: addr,
            tsas: if trtype == 1 { RdmaTsas::DEFAULT } else { RdmaTsas::default() },
        };
        prop_assert_eq!(DiscoveryEntry::decode(&e.encode()).unwrap(), e);
    }

    #[test]
    fn rw_round_trip(nsid in any::<u32>(), slba in any::<u64>(), nlb in any::<u16>(),
                     control in any::<u16>(), reftag in any::<u32>()) {
        let rw = ReadWrite { nsid, slba, nlb, control, dsmgmt: 0, reftag, apptag: 1, appmask: 2 };
        prop_assert_eq!(ReadWrite::from_sqe(&rw.to_sqe(1)), rw);
    }

    /// Arbitrary capsules into a live admin queue and a live I/O queue: never a panic; a
    /// response always echoes the command id, and the controller stays usable.
    #[test]
    fn target_survives_arbitrary_capsules(
        capsules in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200)), 1..24)
    ) {
        let s = setup();
        let mut a = open_queue(&s, 0, 32);
        let cntlid = a.connect_admin(&params(SUBNQN, 0)).unwrap();
        a.enable(2).unwrap();
        let mut q = open_queue(&s, 1, 128);
        q.connect(&params(SUBNQN, 0), cntlid).unwrap();
        for (admin, bytes) in capsules {
            let queue = if admin { &mut a.transport.queue } else { &mut q.transport.queue };
            if !queue.is_live() {
                continue;
            }
            match queue.submit(&bytes, 0) {
                Outcome::Respond(r) => {
                    prop_assert_eq!(r.cqe.cid, Sqe::decode(&bytes).unwrap().cid);
                }
                Outcome::Fetch(mut req) => {
                    let cid = req.sqe().cid;
                    let n = req.buffer_mut().len();
                    prop_assert_eq!(n, req.remote().len as usize);
                    match queue.data_fetched(req, true, 0) {
                        Outcome::Respond(r) => prop_assert_eq!(r.cqe.cid, cid),
                        Outcome::Disconnect => {}
                        _ => prop_assert!(false, "fetch must end in a response"),
                    }
                }
                Outcome::Held | Outcome::Disconnect => {}
            }
        }
    }
}

#[cfg(feature = "std")]
#[test]
fn file_namespace_read_write_flush_deallocate() {
    use nvmf::namespace::{FileNamespace, Namespace};
    let path = std::env::temp_dir().join(format!("nvmf-file-ns-{}", std::process::id()));
    std::fs::write(&path, vec![0u8; 512 * 256]).unwrap();
    let ns = FileNamespace::open(&path, 512, false).unwrap();
    assert_eq!((ns.block_size(), ns.block_count()), (512, 256));
    assert!(ns.volatile_write_cache());
    let data: Vec<u8> = (0..2048).map(|i| (i % 253) as u8).collect();
    ns.write(10, &data).unwrap();
    ns.flush().unwrap();
    let mut back = vec![0u8; 2048];
    ns.read(10, &mut back).unwrap();
    assert_eq!(back, data);
    ns.deallocate(11, 1).unwrap();
    ns.read(10, &mut back).unwrap();
    assert!(back[512..1024].iter().all(|&b| b == 0));
    assert_eq!(
        ns.read(255, &mut back),
        Err(nvmf::namespace::NsError::OutOfRange)
    );
    let ro = FileNamespace::open(&path, 512, true).unwrap();
    assert_eq!(
        ro.write(0, &data[..512]),
        Err(nvmf::namespace::NsError::ReadOnly)
    );
    drop(ns);
    drop(ro);
    std::fs::remove_file(&path).unwrap();
}
