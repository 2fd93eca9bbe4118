//! librdmacm's example programs against their ports (`tools/cm-examples`): one guest boot
//! (TCG is slow) runs rdma-core's `rdma_server`, `rdma_client`, `udaddy` and `ucmatose`
//! one after the other ([`guest::EXAMPLE_STEPS`]), and the host runs the port of each in the
//! other role, on our emulated NIC on the Ethernet link, behind the recording relay:
//!
//! * guest `rdma_server` twice, our `rdma_client` once against each: a restarted client
//!   meets the same guest CM, and its REQ must not look like the first run's (distinct local
//!   communication IDs and starting PSNs, no REJ); the first run also shows that the port
//!   resolves the guest inside address resolution (its ARP request precedes its REQ: the
//!   program adds nothing to the neighbour table, which starts empty);
//! * our `rdma_server`, guest `rdma_client`;
//! * guest `udaddy` server, our client; our server, guest client (UD, SIDR, messages both
//!   ways with immediate data);
//! * guest `ucmatose` server, our client; our server, guest client (two RC connections,
//!   messages both ways, disconnects).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cm::mad::{CmMad, CmMessage};
use interop::guest::{self, GUEST_IP, Guest, HOST_IP, HOST_MAC, Mode};
use interop::tools::{self, Relay, ToolProcess};
use nic_emulator::roce_wire::fabric::Captured;

fn sa(p: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)
}

fn short(out: &str) -> String {
    out.lines()
        .map(|l| l.chars().take(160).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn bin(name: &str) -> PathBuf {
    tools::example_binary(name).unwrap_or_else(|e| panic!("building {name}: {e}"))
}

/// Every IPv4/UDP frame to port 4791 in the capture decodes as RoCEv2 (ICRC included);
/// returns how many there were.
fn roce_frames_decode(cap: &[Captured]) -> usize {
    let mut n = 0;
    for c in cap {
        let f = &c.frame;
        let udp_roce = f.get(12..14) == Some(&[0x08, 0x00])
            && f.get(23) == Some(&17)
            && f.get(36..38) == Some(&[0x12, 0xb7]);
        if udp_roce {
            assert!(
                tools::roce_packet(f).is_some(),
                "tx={} frame does not decode",
                c.tx
            );
            n += 1;
        }
    }
    n
}

/// The CM messages in a capture, in order: (sent by us, MAD).
fn cm_mads(cap: &[Captured]) -> Vec<(bool, CmMad)> {
    cap.iter()
        .filter_map(|c| {
            let p = tools::roce_packet(&c.frame)?;
            (p.bth.dest_qp == 1)
                .then(|| CmMad::decode(&p.payload).ok())
                .flatten()
                .map(|m| (c.tx, m))
        })
        .collect()
}

/// Index of our first ARP request and of our first RoCEv2 frame in a capture.
fn first_arp_and_roce(cap: &[Captured]) -> (Option<usize>, Option<usize>) {
    let ours = |c: &&Captured| c.tx;
    let arp = cap
        .iter()
        .enumerate()
        .filter(|(_, c)| ours(c))
        .find(|(_, c)| {
            c.frame.get(12..14) == Some(&[0x08, 0x06]) && c.frame.get(20..22) == Some(&[0, 1])
        });
    let roce = cap
        .iter()
        .enumerate()
        .filter(|(_, c)| ours(c))
        .find(|(_, c)| tools::roce_packet(&c.frame).is_some());
    (arp.map(|a| a.0), roce.map(|r| r.0))
}

/// The guest's lines of one step (`STEP: ...`), without the prefix.
fn step_lines<'a>(out: &'a str, step: &str) -> Vec<&'a str> {
    let prefix = format!("{step}: ");
    out.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect()
}

/// Whether a run of our client failed in address resolution (the C programs' 2 s for the
/// guest's ARP reply: a guest starved of CPU under TCG on a loaded machine can miss it);
/// nothing reached the guest's CM then.
fn resolution_timed_out(out: &str, err: &str) -> bool {
    err.contains("rdma_create_ep: TimedOut")
        || out.contains("RDMA_CM_EVENT_ADDR_ERROR, error: -110")
}

/// Runs our `prog ARGS` to its end, again (up to 3 runs) while it fails in address
/// resolution; asserts exit 0 and returns (stdout, stderr).
fn run_ours(prog: &str, args: &[&str], g: &Guest) -> (String, String) {
    let mut runs = 0;
    let (st, out, err) = loop {
        let p = ToolProcess::spawn(&bin(prog), args);
        let (st, out, err) = p.finish(Duration::from_secs(120));
        runs += 1;
        if st.success() || runs == 3 || !resolution_timed_out(&out, &err) {
            break (st, out, err);
        }
        eprintln!("our {prog}: address resolution timed out, again (run {runs})");
    };
    assert!(
        st.success(),
        "our {prog}: {st}\n{out}\n{err}\nserial:\n{}",
        short(&g.output())
    );
    (out, err)
}

/// Starts our server `prog ARGS`, waits for its `listening` line, then for its end while the
/// guest's client retries; asserts exit 0 and returns (stdout, stderr).
fn serve_ours(prog: &str, args: &[&str], g: &Guest) -> (String, String) {
    let mut p = ToolProcess::spawn(&bin(prog), args);
    p.wait_stderr("listening on", Duration::from_secs(30));
    let (st, out, err) = p.finish(Duration::from_secs(150));
    assert!(
        st.success(),
        "our {prog}: {st}\n{out}\n{err}\nserial:\n{}",
        short(&g.output())
    );
    (out, err)
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn librdmacm_examples_against_rdma_core() {
    for b in ["rdma_server", "rdma_client", "udaddy", "ucmatose"] {
        bin(b);
    }
    let image = guest::build().expect("guest image");
    let relay = Relay::start(sa(48100), sa(48101), sa(48102), sa(48103)).unwrap();
    let serial = std::env::temp_dir().join(format!("interop-examples-{}.log", std::process::id()));
    let mut g = Guest::boot(
        &image,
        &Mode::Examples {
            connections: 2,
            count: 5,
        },
        sa(48100),
        sa(48101),
        &serial,
    )
    .unwrap();
    let mac = HOST_MAC
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let (host, guest) = (HOST_IP.to_string(), GUEST_IP.to_string());
    let common = [
        "--ip",
        &host,
        "--fabric",
        "eth:48103,48102",
        "--mac",
        &mac,
        "--timeout",
        "60",
    ];
    let with = |extra: &[&'static str]| -> Vec<String> {
        common
            .iter()
            .map(|s| s.to_string())
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let mut figures = Vec::new();
    let t_boot = Instant::now();

    // guest rdma_server twice; our rdma_client against each (the second is a restart)
    let client_args = {
        let mut v = with(&["-s"]);
        v.push(guest.clone());
        v
    };
    let mut reqs: Vec<Vec<(u32, u32)>> = Vec::new();
    for run in 1..=2 {
        g.wait_for(
            &format!("rdma_server-{run} listening"),
            Duration::from_secs(120),
        )
        .unwrap();
        if run == 1 {
            figures.push(format!("boot to the first step {:?}", t_boot.elapsed()));
        }
        let t0 = Instant::now();
        let (out, err) = run_ours("rdma_client", &args(&client_args), &g);
        assert_eq!(
            lines(&out),
            ["rdma_client: start", "rdma_client: end 0"],
            "{err}"
        );
        // the original server sends its 16 zeroed bytes
        assert!(
            err.contains("rdma_client: received 16 bytes: 00000000000000000000000000000000"),
            "{err}"
        );
        g.wait_for(&format!("rdma_server-{run} rc="), Duration::from_secs(60))
            .unwrap();
        figures.push(format!("our rdma_client run {run}: {:?}", t0.elapsed()));
        let cap = relay.take_capture();
        roce_frames_decode(&cap);
        let mads = cm_mads(&cap);
        let ours: Vec<(u32, u32)> = mads
            .iter()
            .filter_map(|(tx, m)| match &m.msg {
                CmMessage::Req(r) if *tx => Some((r.local_comm_id, r.starting_psn)),
                _ => None,
            })
            .collect();
        assert!(!ours.is_empty(), "run {run}: no REQ of ours");
        assert!(
            !mads
                .iter()
                .any(|(tx, m)| !*tx && matches!(m.msg, CmMessage::Rej(_))),
            "run {run}: the guest rejected: {mads:?}"
        );
        if run == 1 {
            // the port resolves the guest inside address resolution: our ARP request
            // precedes our first RoCEv2 frame (the REQ)
            let (arp, roce) = first_arp_and_roce(&cap);
            assert!(
                matches!((arp, roce), (Some(a), Some(r)) if a < r),
                "our ARP request {arp:?}, our first RoCEv2 frame {roce:?}"
            );
        }
        reqs.push(ours);
    }
    // the restarted client's REQs are not the first run's
    for r2 in &reqs[1] {
        assert!(
            reqs[0].iter().all(|r1| r1.0 != r2.0 && r1.1 != r2.1),
            "REQs (comm ID, PSN): run 1 {:x?}, run 2 {:x?}",
            reqs[0],
            reqs[1]
        );
    }

    // our rdma_server, the guest's rdma_client
    let t0 = Instant::now();
    let (out, err) = serve_ours("rdma_server", &args(&with(&[])), &g);
    assert_eq!(
        lines(&out),
        ["rdma_server: start", "rdma_server: end 0"],
        "{err}"
    );
    assert!(
        err.contains("rdma_server: received 16 bytes: 00000000000000000000000000000000"),
        "{err}"
    );
    g.wait_for("rdma_client rc=", Duration::from_secs(60))
        .unwrap();
    figures.push(format!("our rdma_server: {:?}", t0.elapsed()));

    // the guest's udaddy server, our client
    g.wait_for("udaddy-server listening", Duration::from_secs(60))
        .unwrap();
    let t0 = Instant::now();
    let mut v = with(&["-C", "5", "-s"]);
    v.push(guest.clone());
    let (out, err) = run_ours("udaddy", &args(&v), &g);
    assert_eq!(
        lines(&out),
        [
            "udaddy: starting client",
            "udaddy: connecting",
            "initiating data transfers",
            "receiving data transfers",
            "data transfers complete",
            "test complete",
            "return status 0"
        ],
        "{err}"
    );
    assert!(
        err.contains(
            "udaddy: 5 messages received, each with its sender's QP number as immediate data; \
             the replies echo the start of what was sent"
        ),
        "{err}"
    );
    g.wait_for("udaddy-server rc=", Duration::from_secs(60))
        .unwrap();
    figures.push(format!("our udaddy client: {:?}", t0.elapsed()));

    // our udaddy server, the guest's client
    let t0 = Instant::now();
    let (out, err) = serve_ours("udaddy", &args(&with(&["-C", "5"])), &g);
    assert_eq!(
        lines(&out),
        [
            "udaddy: starting server",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0"
        ],
        "{err}"
    );
    assert!(
        err.contains("udaddy: 5 messages received, each with its sender's QP number"),
        "{err}"
    );
    g.wait_for("udaddy-client rc=", Duration::from_secs(60))
        .unwrap();
    figures.push(format!("our udaddy server: {:?}", t0.elapsed()));

    // the guest's ucmatose server (2 connections), our client
    g.wait_for("ucmatose-server listening", Duration::from_secs(60))
        .unwrap();
    let t0 = Instant::now();
    let mut v = with(&["-c", "2", "-C", "5", "-s"]);
    v.push(guest.clone());
    let (out, err) = run_ours("ucmatose", &args(&v), &g);
    assert_eq!(
        lines(&out),
        [
            "cmatose: starting client",
            "cmatose: connecting",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0"
        ],
        "{err}"
    );
    assert!(err.contains("cmatose: 10 messages received"), "{err}");
    g.wait_for("ucmatose-server rc=", Duration::from_secs(60))
        .unwrap();
    figures.push(format!("our ucmatose client: {:?}", t0.elapsed()));

    // our ucmatose server, the guest's client: the guest echoes our pattern
    let t0 = Instant::now();
    let (out, err) = serve_ours("ucmatose", &args(&with(&["-c", "2", "-C", "5"])), &g);
    assert_eq!(
        lines(&out),
        [
            "cmatose: starting server",
            "initiating data transfers",
            "completing sends",
            "receiving data transfers",
            "data transfers complete",
            "cmatose: disconnecting",
            "disconnected",
            "test complete",
            "return status 0"
        ],
        "{err}"
    );
    assert!(
        err.contains("cmatose: 10 messages received; the replies echo what was sent"),
        "{err}"
    );
    let out_g = g.finish(Duration::from_secs(60)).unwrap();
    figures.push(format!("our ucmatose server: {:?}", t0.elapsed()));

    // the guest's side of every step
    for (step, want) in [
        (
            "rdma_server-1",
            &["rdma_server: start", "rdma_server: end 0"][..],
        ),
        (
            "rdma_server-2",
            &["rdma_server: start", "rdma_server: end 0"],
        ),
        ("rdma_client", &["rdma_client: start", "rdma_client: end 0"]),
        (
            "udaddy-server",
            &[
                "udaddy: starting server",
                "receiving data transfers",
                "sending replies",
                "data transfers complete",
                "test complete",
                "return status 0",
            ],
        ),
        (
            "udaddy-client",
            &[
                "udaddy: starting client",
                "udaddy: connecting",
                "initiating data transfers",
                "receiving data transfers",
                "data transfers complete",
                "test complete",
                "return status 0",
            ],
        ),
        (
            "ucmatose-server",
            &[
                "cmatose: starting server",
                "initiating data transfers",
                "completing sends",
                "receiving data transfers",
                "data transfers complete",
                "cmatose: disconnecting",
                "disconnected",
                "test complete",
                "return status 0",
            ],
        ),
        (
            "ucmatose-client",
            &[
                "cmatose: starting client",
                "cmatose: connecting",
                "receiving data transfers",
                "sending replies",
                "data transfers complete",
                "test complete",
                "return status 0",
            ],
        ),
    ] {
        assert_eq!(step_lines(&out_g, step), want, "{}", short(&out_g));
        assert!(
            out_g.lines().any(|l| l.contains(&format!("] {step} rc=0"))),
            "{step}: {}",
            short(&out_g)
        );
    }
    let cap = relay.take_capture();
    assert!(
        roce_frames_decode(&cap) > 20,
        "RoCEv2 frames of the later steps"
    );
    eprintln!(
        "interop figures: librdmacm examples: {}",
        figures.join("; ")
    );
}
