//! Two of our `rping` binaries (`tools/rping`, server and client, each with its own emulated
//! NIC, mlx5 driver and CM) on the two ends of an Ethernet link in QEMU's socket-netdev
//! format on 127.0.0.1, with the relay of `src/tools.rs` in the middle recording every
//! frame: real ARP, then rping's exchange through the CM, checked on both processes' output
//! and on the wire. (`tools/rping/tests/cli.rs` runs the same pair without a relay; this
//! test adds the wire view: who sent which ARP, every frame decodes, segmentation.)

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use interop::tools::{self, Relay, lo, ping_text, roce_packet};
use nic_emulator::roce_wire::fabric::Captured;
use nic_emulator::roce_wire::packet::Opcode;

/// Kills the server if the test fails before it exits.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Output with long lines cut, for failure messages.
fn short(out: &str) -> String {
    out.lines()
        .map(|l| l.chars().take(100).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// ARP frames sent by `tx` (the client) or the server: (requests, replies).
fn arp_ops(cap: &[Captured], tx: bool) -> (usize, usize) {
    cap.iter()
        .filter(|c| c.tx == tx && c.frame.get(12..14) == Some(&[0x08, 0x06]))
        .fold((0, 0), |(q, r), c| match c.frame.get(20..22) {
            Some([0, 1]) => (q + 1, r),
            Some([0, 2]) => (q, r + 1),
            _ => (q, r),
        })
}

#[test]
fn two_rping_processes_over_an_ethernet_link() {
    let bin = tools::rping_binary().unwrap_or_else(|e| panic!("building rping: {e}"));
    // server = the relay's "QEMU" end (binds 48021, sends to 48020); client binds 48023 and
    // sends to 48022
    let relay = Relay::start(lo(48020), lo(48021), lo(48022), lo(48023)).unwrap();
    let mut srv = Killed(
        Command::new(&bin)
            .args(["-s", "-a", "10.77.1.2", "--fabric", "eth:48021,48020"])
            .args(["--mac", "02:00:00:77:01:02", "-v", "-V", "--timeout", "30"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server"),
    );
    let mut err = BufReader::new(srv.0.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("server stderr");
    assert!(
        line.contains(
            "listening on 10.77.1.2:7174 (Ethernet link 127.0.0.1:48021 -> 127.0.0.1:48020, \
             MAC 02:00:00:77:01:02)"
        ),
        "{line}"
    );
    // drain the server's output while it runs (10 lines of 4 KiB would fill a small pipe)
    let mut stdout = srv.0.stdout.take().expect("stdout");
    let sout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let serr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let out = Command::new(&bin)
        .args(["-c", "-a", "10.77.1.2", "-I", "10.77.1.1"])
        .args(["--fabric", "eth:48023,48022", "--mac", "02:00:00:77:01:01"])
        .args([
            "-C",
            "10",
            "-S",
            "4096",
            "-v",
            "-V",
            "-d",
            "--timeout",
            "30",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run the client");
    let cout = String::from_utf8_lossy(&out.stdout);
    let cerr = String::from_utf8_lossy(&out.stderr);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = srv.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit; the client: {}\n{}\n{cerr}",
            out.status,
            short(&cout)
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let sout = sout.join().expect("server stdout");
    let serr = serr.join().expect("server stderr");
    assert!(
        out.status.success(),
        "{}\n{cerr}\nserver:\n{}\n{serr}",
        short(&cout),
        short(&sout)
    );
    assert!(status.success(), "{}\n{serr}", short(&sout));

    // the client found the server by ARP (-d), compared each ping's data with what it sent
    assert!(
        cout.contains("client: 10.77.1.2 is at 02:00:00:77:01:02"),
        "{}",
        short(&cout)
    );
    let want: Vec<String> = (0..10)
        .map(|i| format!("ping data: {}", ping_text(i, 4096)))
        .collect();
    let pings: Vec<&str> = cout
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert!(pings == want, "{}", short(&cout));
    assert_eq!(
        cout.lines().last(),
        Some("rping: client: 10 pings of 4096 bytes, validated")
    );
    assert!(!cerr.contains("left at shutdown"), "{cerr}");
    // the server checked each READ against rping's pattern (-V) and ran until the client
    // disconnected
    let seen: Vec<&str> = sout
        .lines()
        .filter_map(|l| l.strip_prefix("server "))
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert!(seen == want, "{}", short(&sout));
    assert_eq!(
        sout.lines().last(),
        Some("rping: server: 10 pings of 4096 bytes, validated; the client disconnected")
    );

    let cap = relay.take_capture();
    // ARP: the client asked once, the server answered once and learnt the client from the
    // request (it never asked)
    assert_eq!(arp_ops(&cap, true), (1, 0));
    assert_eq!(arp_ops(&cap, false), (0, 1));
    assert!(
        cap.iter().any(|c| !c.tx
            && c.frame.get(12..14) == Some(&[0x08, 0x06])
            && c.frame.get(22..28) == Some(&[2, 0, 0, 0x77, 1, 2][..])),
        "no ARP reply from the server's MAC"
    );
    // every frame is ARP or RoCEv2 that decodes (ICRC checked), within a 1500-byte MTU
    let (mut client, mut server) = (BTreeSet::new(), BTreeSet::new());
    let (mut n_client, mut n_server) = (0, 0);
    for c in &cap {
        assert!(c.frame.len() <= 1514, "{}-byte frame", c.frame.len());
        if c.frame.get(12..14) == Some(&[0x08, 0x06]) {
            continue;
        }
        let p = roce_packet(&c.frame)
            .unwrap_or_else(|| panic!("tx={}: neither ARP nor a valid RoCEv2 frame", c.tx));
        assert!(p.payload.len() <= 1024, "{:?}", p.bth);
        if c.tx {
            client.insert(p.bth.opcode);
            n_client += 1;
        } else {
            server.insert(p.bth.opcode);
            n_server += 1;
        }
    }
    // 4096-byte pings at path MTU 1024: per ping, the server sent a READ request, 4 WRITE
    // packets and 2 SENDs, the client 4 READ responses and 2 SENDs
    assert!(n_server >= 70 && n_client >= 60, "{n_server} {n_client}");
    use Opcode::*;
    assert!(
        server.is_superset(
            &[
                RcRdmaReadRequest,
                RcRdmaWriteFirst,
                RcRdmaWriteMiddle,
                RcRdmaWriteLast,
                RcSendOnly,
            ]
            .into()
        ),
        "{server:?}"
    );
    assert!(
        client.is_superset(
            &[
                RcRdmaReadResponseFirst,
                RcRdmaReadResponseMiddle,
                RcRdmaReadResponseLast,
                RcSendOnly,
            ]
            .into()
        ),
        "{client:?}"
    );
}
