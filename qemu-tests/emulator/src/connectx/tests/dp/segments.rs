//! Segments that reach a device from a bare fabric port: what the responder does with runs it
//! must not read.

use firmware_interface::ctx::qpc;

use roce_wire::fabric::{
    InProcessFabric, PayloadGone, Port, Segment, SegmentPayload, SegmentShape,
};
use roce_wire::packet::{AethKind, Bth, ExtHeaders, Opcode, Packet};
use roce_wire::seg::MessageOp;
use roce_wire::transport::psn_add;

use super::*;

/// A payload that can never be read (its sender withdrew it).
struct Withdrawn;

impl SegmentPayload for Withdrawn {
    fn read(&self, _off: u64, _dst: &mut [u8]) -> Result<(), PayloadGone> {
        Err(PayloadGone)
    }
}

/// A SEND run every packet of which the responder executed before (a retransmission that
/// crossed a late ACK) is a duplicate as a whole: counted, re-ACKed with the last PSN
/// executed, and its payload never read (the sender may have completed the WQE and reused
/// the buffer). Read packet by packet, the withdrawn payload would lose the run instead, and
/// the ACK would not come.
#[test]
fn a_wholly_duplicate_send_run_is_reacked_without_reading_it() {
    let fab = InProcessFabric::new(5);
    let mut b = Node::new([10, 0, 0, 2]);
    assert!(
        b.h.dev
            .attach(Box::new(fab.attach_port(b.ip).unwrap()))
            .is_none()
    );
    let peer_ip = Ipv4Addr::new(10, 0, 0, 1);
    let peer = fab.attach_port(peer_ip).unwrap();
    let cq = b.cq(4);
    let qb = b.qp(qpc::ST_RC, &cq, &cq, 3, Some((3, 1)));
    let conn = Conn::default();
    b.connect(&qb, 0x77, peer_ip, conn);
    let epsn = conn.rq_psn;
    // Packets epsn-8 .. epsn-5 of an 8-packet SEND, already executed.
    let first = psn_add(epsn, 0xff_ffff - 7);
    let mut bth = Bth::new(Opcode::RcSendFirst, qb.qpn, first);
    bth.ack_req = true;
    let head = Packet::new(peer_ip, b.ip, bth, ()).with_ext(ExtHeaders::NONE);
    let shape = SegmentShape {
        msg: MessageOp::Send,
        index: 0,
        msg_pkts: 8,
        count: 4,
        mtu: 1024,
        len: 4096,
    };
    let seg = Segment::new(head, shape, Arc::new(Withdrawn)).unwrap();
    let before = b.h.dev.port_stats();
    peer.send_segment(seg).unwrap();
    assert!(b.h.dev.poll());
    let after = b.h.dev.port_stats();
    assert_eq!(after.rx_frames - before.rx_frames, 4);
    assert_eq!(after.rx_duplicates - before.rx_duplicates, 4);
    assert_eq!(after.rx_dropped, before.rx_dropped, "{after:?}");
    let ack = Packet::decode(&peer.recv().unwrap().expect("an ACK")).unwrap();
    assert_eq!(ack.bth.opcode, Opcode::RcAcknowledge);
    assert_eq!(ack.bth.dest_qp, 0x77);
    assert_eq!(ack.bth.psn, psn_add(epsn, 0xff_ffff));
    assert!(matches!(
        ack.ext.aeth.map(|a| a.kind()),
        Some(AethKind::Ack { .. })
    ));
    assert_eq!(peer.recv().unwrap(), None);
    // Nothing was received: no completion.
    assert!(b.poll_cq(&mut { cq }).is_none());
}
