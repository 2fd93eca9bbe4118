//! The scenarios against Linux soft-RoCE: a QEMU guest (TCG) with `rdma_rxe` on virtio-net,
//! its frames carried by QEMU's socket netdev to our NIC on the Ethernet fabric, and
//! rdma-core's own `rping` on the guest side.
//!
//! In the rping scenarios (including the one with lost frames) the host side is our `rping`
//! binary (`tools/rping`, built by the test) with `--fabric eth:…`, behind a relay that
//! records the frames and loses chosen ones; the reject scenario uses our NIC in-process
//! ([`EthNic`]) with nobody listening, for its CM counters.
//!
//! The guest is built from Debian packages on first use (cached under `target/guest-cache`).
//! The tests share one lock: one QEMU at a time on this 2-core machine.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cm::CmConfig;
use interop::EthNic;
use interop::guest::{self, GUEST_IP, GUEST_MAC, Guest, HOST_IP, HOST_MAC, Image, Mode};
use interop::tools::{self, Relay, ToolProcess};
use nic_emulator::roce_wire::fabric::Captured;
use nic_emulator::roce_wire::packet::{Opcode, Packet, Transport};
use nic_emulator::roce_wire::transport::{psn_cmp, qp_source_port};
use std::collections::BTreeSet;

static QEMU: Mutex<()> = Mutex::new(());

fn image() -> &'static Image {
    static IMG: OnceLock<Image> = OnceLock::new();
    IMG.get_or_init(|| guest::build().expect("guest image"))
}

fn sa(p: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)
}

/// Our end of the link at 127.0.0.1:`port`, QEMU's at `port + 1`.
fn host_nic(port: u16) -> EthNic {
    // rdma_cm in the guest may miss an instant reply (notes, pitfall 1): the link's ARP
    // answers after a moment
    let link = nic_testbed::eth::loopback_link(port, port + 1, HOST_MAC);
    EthNic::start(
        link,
        HOST_IP,
        CmConfig {
            wait_limit_ns: Some(90_000_000_000),
            ..CmConfig::default()
        },
    )
    .expect("host NIC")
}

fn serial(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("interop-{name}-{}.log", std::process::id()))
}

/// The serial output with long lines cut, for failure messages.
fn short(out: &str) -> String {
    out.lines()
        .map(|l| l.chars().take(160).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The RoCEv2 packets of a capture, decoded: (sent by us, packet).
fn roce_packets(cap: &[Captured]) -> Vec<(bool, Packet)> {
    cap.iter()
        .filter(|c| c.frame.get(12..14) == Some(&[0x08, 0x00]))
        .filter_map(|c| {
            let ip = &c.frame[14..];
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            Packet::decode(&ip[..total]).ok().map(|p| (c.tx, p))
        })
        .collect()
}

/// Checks both sides' packets against each other: the same UDP source ports (rxe's flow
/// hash of the two QPNs for RC, on both sides), rxe's QP1 port and AckReq, payloads
/// within path MTU 1024 and frames within a 1500-byte Ethernet MTU, every AckReq packet
/// answered with its PSN, AETH MSNs counting up message by message. Returns the opcodes seen (ours, rxe's).
fn check_wire(cap: &[Captured]) -> (BTreeSet<Opcode>, BTreeSet<Opcode>) {
    let pk = roce_packets(cap);
    assert!(pk.len() > 20, "{} RoCE packets", pk.len());
    // INTEROP_DUMP_DIR=dir: the first Ethernet frame of each opcode rxe sent, as hex (how
    // tests/frames/rc_*.hex were made)
    if let Some(dir) = std::env::var_os("INTEROP_DUMP_DIR") {
        let mut seen = BTreeSet::new();
        for c in cap.iter().filter(|c| !c.tx) {
            if let Some((_, p)) = roce_packets(std::slice::from_ref(c)).first()
                && seen.insert(p.bth.opcode)
            {
                let hex: String = c.frame.iter().map(|b| format!("{b:02x}")).collect();
                let name = format!("{:?}.hex", p.bth.opcode);
                std::fs::write(std::path::Path::new(&dir).join(name), hex).unwrap();
            }
        }
    }
    for c in cap {
        assert!(c.frame.len() <= 1514, "{}-byte frame", c.frame.len());
    }
    let (mut ours, mut theirs) = (BTreeSet::new(), BTreeSet::new());
    let mut rc_sport = None;
    // per side: the last AETH MSN (the responder's count of completed messages)
    let mut msn: [Option<u32>; 2] = [None, None];
    for (i, (tx, p)) in pk.iter().enumerate() {
        if let Some(a) = p.ext.aeth {
            let last = &mut msn[usize::from(*tx)];
            if let Some(m) = *last {
                assert!(a.msn >= m && a.msn <= m + 4, "MSN {m} then {}", a.msn);
            }
            *last = Some(a.msn);
        }
        if *tx { &mut ours } else { &mut theirs }.insert(p.bth.opcode);
        assert!(p.payload.len() <= 1024, "{:?}", p.bth);
        match p.bth.opcode.transport() {
            Transport::Ud => {
                assert_eq!(p.bth.dest_qp, 1);
                if *tx {
                    // ours: the port of the AV's flow label (mlx5 puts it in the AV)
                    assert!(p.udp_src_port >= 0xc000, "{:#x}", p.udp_src_port);
                } else {
                    // rxe: 0xC000 + hash_32(1, 14), AckReq set
                    assert_eq!(p.udp_src_port, qp_source_port(1));
                    assert!(p.bth.ack_req);
                }
            }
            Transport::Rc => {
                // one flow: both sides hash the same two QPNs
                assert_eq!(*rc_sport.get_or_insert(p.udp_src_port), p.udp_src_port);
                if p.bth.ack_req {
                    // answered: an ACK or response carrying this PSN (or a later one)
                    let answered = pk[i + 1..].iter().any(|(t, a)| {
                        *t != *tx
                            && a.ext.aeth.is_some()
                            && psn_cmp(a.bth.psn, p.bth.psn) != std::cmp::Ordering::Less
                    });
                    let last = pk[i + 1..].iter().all(|(t, _)| *t == *tx);
                    assert!(answered || last, "{:?} tx={tx} not answered", p.bth);
                }
            }
            t => panic!("unexpected transport {t:?}"),
        }
    }
    (ours, theirs)
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    QEMU.lock().unwrap_or_else(|e| e.into_inner())
}

/// The text of rping's ping `i` of `size` bytes (as `%s` prints it).
/// Our rping client's own output for `n` validated 64-byte pings: each ping line is rping's
/// pattern for that ping, in order, and the last line is the validated summary.
fn assert_client_pings(out: &str, n: u32) {
    let pings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    let want: Vec<String> = (0..n)
        .map(|i| format!("ping data: {}", text(i, 64)))
        .collect();
    assert_eq!(pings, want, "{out}");
    assert_eq!(
        out.lines().last(),
        Some(format!("rping: client: {n} pings of 64 bytes, validated").as_str()),
        "{out}"
    );
}

fn text(i: u32, size: usize) -> String {
    tools::ping_text(i, size)
}

/// Our `rping` binary (`tools/rping`) on the Ethernet fabric, run as a user runs it, killed
/// if the test fails first; its output is collected as it comes.
struct OurRping;

impl OurRping {
    fn spawn(args: &[&str]) -> ToolProcess {
        let bin = tools::rping_binary().unwrap_or_else(|e| panic!("building rping: {e}"));
        ToolProcess::spawn(&bin, args)
    }
}

/// Our rping's timing line (stderr): "rping: MODE: N pings in X ms, Y ms per ping".
fn timing(err: &str) -> String {
    err.lines()
        .find(|l| l.contains(" pings in "))
        .unwrap_or("(no timing line)")
        .to_string()
}

/// Every RoCEv2 frame in the capture (both directions) decodes: IPv4, UDP to 4791, BTH,
/// extension headers and the ICRC all check out.
fn all_roce_frames_decode(cap: &[Captured]) {
    let mut n = 0;
    for c in cap
        .iter()
        .filter(|c| c.frame.get(12..14) == Some(&[0x08, 0x00]))
    {
        let ip = &c.frame[14..];
        // UDP to 4791 (ICMP echo is the other IPv4 traffic)
        if ip.get(9) != Some(&17) || ip.get(22..24) != Some(&[0x12, 0xb7]) {
            continue;
        }
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if let Err(e) = Packet::decode(&ip[..total]) {
            panic!("tx={} frame does not decode: {e:?}", c.tx);
        }
        n += 1;
    }
    assert!(n > 20, "{n} RoCEv2 frames");
}

/// ARP in the capture: (requests, replies) sent by `tx` (our side) or the guest.
fn arp_ops(cap: &[Captured], tx: bool) -> (usize, usize) {
    let ops = cap
        .iter()
        .filter(|c| c.tx == tx && c.frame.get(12..14) == Some(&[0x08, 0x06]))
        .filter_map(|c| {
            c.frame
                .get(20..22)
                .map(|o| u16::from_be_bytes([o[0], o[1]]))
        });
    ops.fold((0, 0), |(q, r), op| match op {
        1 => (q + 1, r),
        2 => (q, r + 1),
        _ => (q, r),
    })
}

/// [`HOST_MAC`] as our rping's `--mac` takes it.
fn host_mac_arg() -> String {
    HOST_MAC
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A relay on ports `base..base + 4` and a guest running `rping -s` for `count` pings
/// behind it (its socket netdev on `base` and `base + 1`), listening.
fn relayed_guest_server(base: u16, count: u32, name: &str) -> (Relay, Guest) {
    let relay = Relay::start(sa(base), sa(base + 1), sa(base + 2), sa(base + 3)).unwrap();
    let mut g = Guest::boot(
        image(),
        &Mode::Server { count },
        sa(base),
        sa(base + 1),
        &serial(name),
    )
    .unwrap();
    g.wait_for("rping server listening", Duration::from_secs(90))
        .unwrap();
    (relay, g)
}

/// The guest runs `rping -s -v -V -C 10`; our `rping` binary connects from the host with its
/// defaults (64-byte pings, as the guest's default buffer), through a relay that records the
/// frames.
#[test]
fn guest_rping_server_our_client() {
    let _g = lock();
    tools::rping_binary().unwrap_or_else(|e| panic!("{e}"));
    let (relay, g) = relayed_guest_server(48030, 10, "server");
    let t0 = Instant::now();
    let ours = OurRping::spawn(&[
        "-c",
        "-a",
        &GUEST_IP.to_string(),
        "-I",
        &HOST_IP.to_string(),
        "--fabric",
        "eth:48033,48032",
        "--mac",
        &host_mac_arg(),
        "-C",
        "10",
        "-v",
        "-V",
        "--timeout",
        "60",
    ]);
    let (st, out, err) = ours.finish(Duration::from_secs(90));
    let took = t0.elapsed();
    assert!(
        st.success(),
        "our rping: {st}\n{out}\n{err}\nserial:\n{}",
        short(&g.output())
    );
    // our client's own output: each ping verified against what it sent, in order
    assert_client_pings(&out, 10);
    let out_g = g.finish(Duration::from_secs(60)).unwrap();
    for i in 0..10 {
        let line = format!("server ping data: {}", text(i, 64));
        assert!(
            out_g.contains(&line),
            "missing {line:?} in\n{}",
            short(&out_g)
        );
    }
    // our disconnect ended the guest's server cleanly
    assert!(
        out_g.contains("server DISCONNECT EVENT"),
        "{}",
        short(&out_g)
    );
    assert!(out_g.contains("rping server rc=0"), "{}", short(&out_g));
    let cap = relay.take_capture();
    // we asked for the guest's MAC (it had not heard from us: its boot-time ping went
    // unanswered) and its kernel answered
    let (q, r) = arp_ops(&cap, true);
    assert!(q >= 1 && r == 0, "our ARP: {q} requests, {r} replies");
    let (q, r) = arp_ops(&cap, false);
    assert!(r >= 1, "the guest's ARP: {q} requests, {r} replies");
    assert!(
        cap.iter().any(|c| !c.tx
            && c.frame.get(12..14) == Some(&[0x08, 0x06])
            && c.frame.get(20..22) == Some(&[0, 2])
            && c.frame.get(22..28) == Some(&GUEST_MAC[..])),
        "no ARP reply from the guest's MAC"
    );
    all_roce_frames_decode(&cap);
    let (ours, theirs) = check_wire(&cap);
    use Opcode::*;
    // the guest server READs our source and WRITEs our sink; both sides SEND and ACK
    assert!(
        theirs.is_superset(
            &[
                RcRdmaReadRequest,
                RcRdmaWriteOnly,
                RcSendOnly,
                RcAcknowledge
            ]
            .into()
        ),
        "{theirs:?}"
    );
    assert!(
        ours.is_superset(&[RcRdmaReadResponseOnly, RcSendOnly, RcAcknowledge].into()),
        "{ours:?}"
    );
    eprintln!(
        "interop figures: guest rping -s, our rping -c: {} (process start to exit {took:?})",
        timing(&err)
    );
}

/// Our `rping` binary serves on the host (`rping -s -v -V`: one connection, until the client
/// disconnects); the guest runs `rping -c -v -V -C 10 -S 4096`.
#[test]
fn our_rping_server_guest_client() {
    let _g = lock();
    tools::rping_binary().unwrap_or_else(|e| panic!("{e}"));
    let relay = Relay::start(sa(48040), sa(48041), sa(48042), sa(48043)).unwrap();
    let mut ours = OurRping::spawn(&[
        "-s",
        "-a",
        &HOST_IP.to_string(),
        "--fabric",
        "eth:48043,48042",
        "--mac",
        &host_mac_arg(),
        "-v",
        "-V",
        "--timeout",
        "150",
    ]);
    ours.wait_stderr(
        &format!(
            "listening on 10.77.0.1:7174 (Ethernet link 127.0.0.1:48043 -> 127.0.0.1:48042, \
             MAC {})",
            host_mac_arg()
        ),
        Duration::from_secs(30),
    );
    let g = Guest::boot(
        image(),
        &Mode::Client {
            count: 10,
            size: 4096,
            port: 7174,
        },
        sa(48040),
        sa(48041),
        &serial("client"),
    )
    .unwrap();
    let (st, out, err) = ours.finish(Duration::from_secs(180));
    assert!(
        st.success(),
        "our rping: {st}\n{out}\n{err}\nserial:\n{}",
        short(&g.output())
    );
    // our server's own output: each READ checked against rping's pattern (-V), then the
    // guest's disconnect ended it cleanly after its 10 pings
    let pings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("server ping data: "))
        .collect();
    let want: Vec<String> = (0..10)
        .map(|i| format!("server ping data: {}", text(i, 4096)))
        .collect();
    assert_eq!(pings, want, "{out}");
    assert_eq!(
        out.lines().last(),
        Some("rping: server: 10 pings of 4096 bytes, validated; the client disconnected"),
        "{out}"
    );
    let out_g = g.finish(Duration::from_secs(60)).unwrap();
    // the guest reached us by ARP and ping while booting (our NIC answered both)
    assert!(out_g.contains("ping ok"), "{}", short(&out_g));
    for i in 0..10 {
        let line = format!("ping data: {}", text(i, 4096));
        assert!(
            out_g.contains(&line),
            "missing ping {i} in\n{}",
            short(&out_g)
        );
    }
    assert!(!out_g.contains("data mismatch"), "{}", short(&out_g));
    assert!(out_g.contains("rping client rc=0"), "{}", short(&out_g));
    // our CM answered the guest's DREQ
    assert!(
        out_g.contains("client DISCONNECT EVENT"),
        "{}",
        short(&out_g)
    );
    let cap = relay.take_capture();
    let (q, r) = arp_ops(&cap, true);
    assert!(r >= 1, "our ARP: {q} requests, {r} replies");
    all_roce_frames_decode(&cap);
    let (ours, theirs) = check_wire(&cap);
    use Opcode::*;
    // 4096-byte pings at path MTU 1024: rxe's read responses and our writes are segmented
    assert!(
        theirs.is_superset(
            &[
                RcRdmaReadResponseFirst,
                RcRdmaReadResponseMiddle,
                RcRdmaReadResponseLast,
                RcSendOnly,
                RcAcknowledge
            ]
            .into()
        ),
        "{theirs:?}"
    );
    assert!(
        ours.is_superset(
            &[
                RcRdmaReadRequest,
                RcRdmaWriteFirst,
                RcRdmaWriteMiddle,
                RcRdmaWriteLast,
                RcSendOnly,
                RcAcknowledge
            ]
            .into()
        ),
        "{ours:?}"
    );
    eprintln!(
        "interop figures: our rping -s, guest rping -c -S 4096: {}",
        timing(&err)
    );
}

#[test]
fn guest_client_to_unused_port_is_rejected() {
    let _g = lock();
    let nic = host_nic(48050);
    let g = Guest::boot(
        image(),
        &Mode::Client {
            count: 1,
            size: 64,
            port: 7999,
        },
        sa(48050),
        sa(48051),
        &serial("reject"),
    )
    .unwrap();
    let out = g.finish(Duration::from_secs(90)).unwrap();
    let rej = out
        .lines()
        .find(|l| l.contains("RDMA_CM_EVENT_REJECTED"))
        .unwrap_or_else(|| panic!("no REJECTED in\n{}", short(&out)));
    // rdma_cm reports the REJ's reason: 8, invalid service ID (nobody listens there), what
    // Linux's own CM sends in that case.
    assert!(rej.ends_with("RDMA_CM_EVENT_REJECTED, error 8"), "{rej}");
    assert!(!out.contains("rping client rc=0"), "{}", short(&out));
    let st = nic.cm.stats();
    assert!(st.mads_received >= 1 && st.mads_sent >= 1, "{st:?}");
}

/// Lost frames in both directions, recovered by both transports: the relay loses our READ
/// response (rxe retries its READ, which we replay), one of our ACKs (our next, cumulative
/// ACK covers it, or rxe retries), one of rxe's ACKs (our requester's timer retries the
/// SEND) and one of rxe's SENDs (rxe's timer retries it). The host side is our `rping`
/// binary, behind the relay.
#[test]
fn retransmissions_across_rxe() {
    let _g = lock();
    tools::rping_binary().unwrap_or_else(|e| panic!("{e}"));
    let (relay, g) = relayed_guest_server(48060, 5, "retx");
    // (sent by our rping, opcode)
    let plan = [
        (true, Opcode::RcRdmaReadResponseOnly), // rxe's READ times out, retried
        (true, Opcode::RcAcknowledge),          // covered by our next ACK, or rxe retries
        (false, Opcode::RcAcknowledge),         // our SEND retried
        (false, Opcode::RcSendOnly),            // rxe's go-ahead lost, rxe retries it
    ];
    for (by_us, op) in plan {
        relay.drop_next(by_us, op);
    }
    let t0 = Instant::now();
    let ours = OurRping::spawn(&[
        "-c",
        "-a",
        &GUEST_IP.to_string(),
        "-I",
        &HOST_IP.to_string(),
        "--fabric",
        "eth:48063,48062",
        "--mac",
        &host_mac_arg(),
        "-C",
        "5",
        "-v",
        "-V",
        "-d",
        "--timeout",
        "60",
    ]);
    let (st, out, err) = ours.finish(Duration::from_secs(90));
    let took = t0.elapsed();
    assert!(
        st.success(),
        "our rping: {st}\n{out}\n{err}\nserial:\n{}",
        short(&g.output())
    );
    assert_client_pings(&out, 5);
    // -d reports device objects left at our NIC's shutdown: everything was released
    assert!(
        !err.contains("left at shutdown") && !err.contains("rping: shutdown:"),
        "{err}"
    );
    let out_g = g.finish(Duration::from_secs(60)).unwrap();
    for i in 0..5 {
        let line = format!("server ping data: {}", text(i, 64));
        assert!(
            out_g.contains(&line),
            "missing {line:?} in\n{}",
            short(&out_g)
        );
    }
    assert!(out_g.contains("rping server rc=0"), "{}", short(&out_g));
    assert!(
        out_g.contains("server DISCONNECT EVENT"),
        "{}",
        short(&out_g)
    );
    // every planned loss happened, and each was recovered on the wire
    assert_eq!(relay.pending_drops(), vec![], "losses that never matched");
    let log = relay.take_log();
    let forwarded: Vec<Captured> = log
        .iter()
        .filter(|r| !r.dropped)
        .map(|r| r.captured.clone())
        .collect();
    all_roce_frames_decode(&forwarded);
    let retx = check_recovery(&log);
    // rxe retried its READ and its SEND, and we retried our SEND (at least these three)
    assert!(retx.len() >= 3, "{retx:x?}");
    assert!(
        retx.iter()
            .any(|r| !r.0 && r.1 == Opcode::RcRdmaReadRequest),
        "{retx:x?}"
    );
    assert!(
        retx.iter().any(|r| !r.0 && r.1 == Opcode::RcSendOnly),
        "{retx:x?}"
    );
    assert!(
        retx.iter().any(|r| r.0 && r.1 == Opcode::RcSendOnly),
        "{retx:x?}"
    );
    eprintln!("interop figures: retransmissions (sent by us, opcode, PSN): {retx:x?}");
    eprintln!(
        "interop figures: 5 pings with 4 lost frames: {} (process start to exit {took:?})",
        timing(&err)
    );
}

/// The first packets of a list, for failure messages: (sent by us, opcode, PSN).
fn summary(pk: &[(bool, Packet)]) -> String {
    let v: Vec<(bool, Opcode, u32)> = pk
        .iter()
        .take(16)
        .map(|(t, q)| (*t, q.bth.opcode, q.bth.psn))
        .collect();
    format!("{v:x?}")
}

/// Checks that each frame the relay lost was recovered by the transport that had to
/// recover it, on the frames that got through after the loss, and returns the retransmitted
/// requests (sent by us, opcode, PSN):
/// * a lost request: its sender sent the same opcode with the same PSN again;
/// * a lost READ response: the requester sent its READ request with that PSN again, and the
///   responder then replayed the response with that PSN;
/// * a lost ACK of PSN p: the requester sent again a request with a PSN at or before p
///   (requesters' PSNs only grow, so that is a retransmission); for a lost ACK of ours, a
///   later ACK of ours beyond p (cumulative) also does, when rxe went on before its timer.
fn check_recovery(log: &[tools::Relayed]) -> Vec<(bool, Opcode, u32)> {
    let mut retx = Vec::new();
    for (i, lost) in log.iter().enumerate().filter(|(_, r)| r.dropped) {
        let p = tools::roce_packet(&lost.captured.frame).expect("a lost frame is RoCEv2");
        let tx = lost.captured.tx;
        // the forwarded RoCEv2 packets after the loss: (sent by us, packet)
        let later: Vec<(bool, Packet)> = log[i + 1..]
            .iter()
            .filter(|r| !r.dropped)
            .filter_map(|r| tools::roce_packet(&r.captured.frame).map(|q| (r.captured.tx, q)))
            .collect();
        let (op, psn) = (p.bth.opcode, p.bth.psn);
        match op {
            Opcode::RcRdmaReadResponseOnly => {
                let again = later.iter().position(|(t, q)| {
                    *t != tx && q.bth.opcode == Opcode::RcRdmaReadRequest && q.bth.psn == psn
                });
                let again = again.unwrap_or_else(|| {
                    panic!(
                        "lost READ response {psn:#x}: no READ retried: {}",
                        summary(&later)
                    )
                });
                assert!(
                    later[again..]
                        .iter()
                        .any(|(t, q)| *t == tx && q.bth.opcode == op && q.bth.psn == psn),
                    "lost READ response {psn:#x}: the retried READ was not answered"
                );
                retx.push((!tx, Opcode::RcRdmaReadRequest, psn));
            }
            Opcode::RcAcknowledge => {
                let again = later.iter().find(|(t, q)| {
                    *t != tx
                        && q.bth.opcode.is_request()
                        && psn_cmp(q.bth.psn, psn) != std::cmp::Ordering::Greater
                });
                match again {
                    Some((_, q)) => retx.push((!tx, q.bth.opcode, q.bth.psn)),
                    // rxe may send its next request before its timer fires: then our ACK of
                    // that one covers the lost one (ACKs are cumulative) and nothing needs
                    // retrying. Our requester waits for each SEND's ACK before the next
                    // request, so a lost ACK of rxe's must be followed by our retry.
                    None if tx => assert!(
                        later.iter().any(|(t, q)| *t == tx
                            && q.bth.opcode == Opcode::RcAcknowledge
                            && psn_cmp(q.bth.psn, psn) == std::cmp::Ordering::Greater),
                        "our lost ACK {psn:#x}: neither retried by rxe nor covered by a later \
                         ACK: {}",
                        summary(&later)
                    ),
                    None => panic!(
                        "rxe's lost ACK {psn:#x}: we retransmitted nothing: {}",
                        summary(&later)
                    ),
                }
            }
            _ => {
                assert!(op.is_request(), "{op:?}");
                assert!(
                    later
                        .iter()
                        .any(|(t, q)| *t == tx && q.bth.opcode == op && q.bth.psn == psn),
                    "lost {op:?} {psn:#x} (tx={tx}): not retransmitted: {}",
                    summary(&later)
                );
                retx.push((tx, op, psn));
            }
        }
    }
    retx
}

/// QEMU processes whose command line mentions `needle` (from /proc).
fn qemus_with(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.starts_with("qemu-system") && c.contains(needle))
        .count()
}

/// A test that fails with its guest still running does not leave QEMU behind.
#[test]
fn dropping_a_running_guest_stops_qemu() {
    let _g = lock();
    let log = serial("drop");
    let needle = log.display().to_string();
    let g = Guest::boot(
        image(),
        &Mode::Server { count: 1 },
        sa(48070),
        sa(48071),
        &log,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while qemus_with(&needle) == 0 {
        assert!(Instant::now() < end, "QEMU did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Dropping waits for `timeout`, which exits only after QEMU did: nothing may be left
    // once drop returns, however slow the machine.
    drop(g);
    assert_eq!(
        qemus_with(&needle),
        0,
        "QEMU still running after the guest was dropped"
    );
    assert!(!log.exists(), "serial log removed");
}

/// The tests perftest's `-R` exchange covers, as rperf names them (the guest runs `ib_<test>`).
const PERFTEST_TESTS: [&str; 5] = ["write_bw", "read_bw", "send_bw", "send_lat", "write_lat"];

/// Runs our `rperf` with `args` (the test fails, the process killed, after `limit`): exit
/// status, stdout, stderr.
fn run_rperf(args: &[String], limit: Duration) -> (Option<i32>, String, String) {
    let bin = tools::rperf_binary().unwrap_or_else(|e| panic!("building rperf: {e}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (st, out, err) = ToolProcess::spawn(&bin, &args).finish(limit);
    (st.code(), out, err)
}

/// Whether `out` has a figures row for `size` bytes and `iters` iterations whose other
/// figures are positive numbers: rperf's (the line after its `#bytes` header) or perftest's
/// (prefixed `perftest <test>: ` by the guest).
fn has_row(out: &str, prefix: &str, size: usize, iters: usize) -> bool {
    out.lines().any(|l| {
        let Some(rest) = l.strip_prefix(prefix) else {
            return false;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.len() >= 5
            && f[0] == size.to_string()
            && f[1] == iters.to_string()
            && f[2..5]
                .iter()
                .all(|x| x.parse::<f64>().is_ok_and(|v| v > 0.0))
    })
}

/// rperf's table (header and row) from its output, for the figures printed with
/// `--nocapture`.
fn figures(out: &str) -> String {
    let mut l = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"));
    l.by_ref().take(2).collect::<Vec<_>>().join("\n")
}

/// perftest's rdma_cm mode (`-R`) against our `rperf -R`, in one guest boot: first the
/// guest's `ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_send_lat`, `ib_write_lat` serve
/// and our rperf connects to each, then our rperf serves each test and the guest's tool
/// connects. 4 KiB messages (segmented at the path MTU of 1024), 20 iterations.
#[test]
fn perftest_rdma_cm_both_ways() {
    let _g = lock();
    tools::rperf_binary().unwrap_or_else(|e| panic!("{e}"));
    const SIZE: usize = 4096;
    const ITERS: u32 = 20;
    const PORT: u16 = 18600;
    let tests: Vec<String> = PERFTEST_TESTS.iter().map(|s| s.to_string()).collect();
    let mut g = Guest::boot(
        image(),
        &Mode::Perftest {
            serve: tests.clone(),
            connect: tests.clone(),
            size: SIZE,
            iters: ITERS,
            port: PORT,
        },
        sa(48080),
        sa(48081),
        &serial("perftest"),
    )
    .unwrap();
    let common = |test: &str| -> Vec<String> {
        [
            test,
            "-R",
            "-s",
            &SIZE.to_string(),
            "-n",
            &ITERS.to_string(),
            "--bind",
            &HOST_IP.to_string(),
            "--fabric",
            "eth:48080,48081",
            "--timeout",
            "60",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // the guest serves, our rperf connects
    for test in PERFTEST_TESTS {
        g.wait_for(
            &format!("perftest server {test} listening"),
            Duration::from_secs(150),
        )
        .unwrap();
        let mut args = common(test);
        args.push(GUEST_IP.to_string());
        let (code, out, err) = run_rperf(&args, Duration::from_secs(120));
        let ctx = format!("{test}: our client {code:?}\n{out}\n{err}");
        assert_eq!(code, Some(0), "{ctx}\nserial:\n{}", short(&g.output()));
        assert!(out.contains("CLIENT of a perftest exchange"), "{ctx}");
        // write_lat: the first round trip is the server's own
        let n = if test == "write_lat" {
            ITERS - 1
        } else {
            ITERS
        };
        assert!(has_row(&out, " ", SIZE, n as usize), "{ctx}");
        eprintln!("guest ib_{test} -R server, our client:\n{}", figures(&out));
        g.wait_for(
            &format!("perftest server {test} rc=0"),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{ctx}\n{}", e.0));
    }
    // our rperf serves, the guest connects (each test on its own CM port)
    for (k, test) in PERFTEST_TESTS.iter().enumerate() {
        let mut args = common(test);
        args.extend([
            "--server".into(),
            "-p".into(),
            (PORT + k as u16).to_string(),
        ]);
        let (code, out, err) = run_rperf(&args, Duration::from_secs(150));
        let ctx = format!("{test}: our server {code:?}\n{out}\n{err}");
        assert_eq!(code, Some(0), "{ctx}\nserial:\n{}", short(&g.output()));
        assert!(out.contains("SERVER of a perftest exchange"), "{ctx}");
        if matches!(*test, "write_bw" | "read_bw") {
            assert!(out.contains("the client's figures"), "{ctx}");
        }
        let n = match *test {
            "send_lat" => ITERS - 1,
            _ => ITERS,
        };
        if *test != "write_bw" && *test != "read_bw" {
            assert!(has_row(&out, " ", SIZE, n as usize), "{ctx}");
        }
        eprintln!("our {test} -R server, guest client:\n{}", figures(&out));
        g.wait_for(
            &format!("perftest client {test} rc=0"),
            Duration::from_secs(90),
        )
        .unwrap_or_else(|e| panic!("{ctx}\n{}", e.0));
    }
    let out_g = g.finish(Duration::from_secs(60)).unwrap();
    for test in PERFTEST_TESTS {
        // perftest's own row on each side of each test
        let prefix = format!("perftest {test}: ");
        let rows = out_g
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter(|l| has_row(l, &prefix, SIZE, ITERS as usize))
            .count();
        assert!(rows >= 1, "{test}: no perftest row\n{}", short(&out_g));
    }
}
