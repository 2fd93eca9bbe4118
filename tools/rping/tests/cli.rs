//! Runs the `rping` binary (embedded, and as server and client processes) and checks its
//! output and exit status.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

fn rping(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(args)
        .output()
        .expect("run rping")
}

/// An `rping -s` process in the background.
struct Server {
    child: Child,
    err: BufReader<ChildStderr>,
}

impl Server {
    /// Starts `rping ARGS` and returns it with the first line it wrote to stderr (the
    /// "listening on" line: once it is there, clients can connect).
    fn start(args: &[&str]) -> (Server, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rping"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        err.read_line(&mut line).expect("server stderr");
        (Server { child, err }, line)
    }

    /// Waits up to a minute for the server to exit (killing it after that, and failing) and
    /// returns its status, its stdout and the rest of its stderr.
    fn finish(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server did not exit");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut sout = String::new();
        self.child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut sout)
            .expect("server stdout");
        let mut serr = String::new();
        self.err.read_to_string(&mut serr).expect("server stderr");
        (status, sout, serr)
    }
}

#[test]
fn five_verbose_validated_pings() {
    let out = rping(&["-C", "5", "-S", "64", "-v", "-V"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert_eq!(pings.len(), 5, "{stdout}");
    for (i, l) in pings.iter().enumerate() {
        let prefix = format!("ping data: rdma-ping-{i}: ");
        assert!(l.starts_with(&prefix), "{l}");
        // 64 bytes, the last a NUL: 63 characters after "ping data: "
        assert_eq!(l.len() - "ping data: ".len(), 63, "{l}");
        let first = (b'A' + i as u8) as char;
        assert_eq!(l[prefix.len()..].chars().next(), Some(first), "{l}");
    }
    assert_eq!(
        stdout.lines().last(),
        Some("rping: embedded: 5 pings of 64 bytes, validated")
    );
}

#[test]
fn three_pings_of_4096_bytes() {
    let out = rping(&["-S", "4096", "-C", "3", "-V"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("ping data:"), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("rping: embedded: 3 pings of 4096 bytes, validated")
    );
}

#[test]
fn bad_options_exit_2() {
    for (args, want) in [
        (&["-x"][..], "unknown option"),
        (&["-S", "10"], "Invalid size"),
        (&["-C"], "needs a value"),
        (&["-c"], "-c needs the server's address"),
        (&["-s", "-c", "-a", "127.0.0.2"], "exclusive"),
        (&["-c", "-a", "10.0.0.1"], "127.0.0.0/8"),
        (&["-a", "127.0.0.2"], "need -s or -c"),
        (&["-s", "-I", "127.0.0.1"], "-I applies to the client"),
        (&["-c", "-a", "localhost"], "not an IPv4 address"),
        (&["-s", "--fabric-port", "0"], "invalid fabric port"),
        (&["-s", "--fabric", "eth:1"], "eth:LOCAL,REMOTE"),
        (
            &["-s", "--fabric", "eth:48080,48081"],
            "needs this NIC's address",
        ),
        (
            &["-c", "-a", "10.78.0.1", "--fabric", "eth:48080,48081"],
            "needs this NIC's address on the wire (-I src)",
        ),
        (
            &["-s", "-a", "127.0.0.1", "--fabric", "eth:48080,48081"],
            "not a unicast address for the virtual wire",
        ),
        (&["-s", "--mac", "02:00:00:00:00:01"], "--mac applies"),
        (
            &[
                "-s",
                "-a",
                "10.78.0.1",
                "--fabric",
                "eth:1,2",
                "--mac",
                "03:00:00:00:00:01",
            ],
            "multicast",
        ),
        (&["--fabric", "eth:1,2"], "need -s or -c"),
    ] {
        let out = rping(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Runs `rping -s` and `rping -c` as two processes on the UDP fabric (127.0.7.20/.21, fabric
/// port 47050): the client's pings are verified, the server reports each ping's data.
#[test]
fn server_and_client_as_two_processes() {
    // (the server's -C is ignored, as rdma-core's: 9 would fail the test otherwise)
    let common = [
        "-S",
        "64",
        "-v",
        "--fabric-port",
        "47050",
        "--timeout",
        "20",
    ];
    let srv_args: Vec<&str> = ["-s", "-a", "127.0.7.20", "-C", "9"]
        .into_iter()
        .chain(common)
        .collect();
    let (srv, line) = Server::start(&srv_args);
    assert!(
        line.contains("listening on 127.0.7.20:7174 (fabric UDP port 47050)"),
        "{line}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rping"))
        .args([
            "-c",
            "-a",
            "127.0.7.20",
            "-I",
            "127.0.7.21",
            "-V",
            "-C",
            "4",
        ])
        .args(common)
        .output()
        .expect("run the client");
    let (status, sout, serr) = srv.finish();
    let cout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{cout}\n{}\nserver:\n{sout}\n{serr}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "{sout}\n{serr}");
    let pings: Vec<&str> = cout
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert_eq!(pings.len(), 4, "{cout}");
    for (i, l) in pings.iter().enumerate() {
        assert!(l.starts_with(&format!("ping data: rdma-ping-{i}: ")), "{l}");
    }
    assert_eq!(
        cout.lines().last(),
        Some("rping: client: 4 pings of 64 bytes, validated")
    );
    // The server READ each ping's data from the client's buffer.
    let seen: Vec<&str> = sout
        .lines()
        .filter_map(|l| l.strip_prefix("server "))
        .collect();
    assert_eq!(seen, pings, "{sout}");
    // -C does not limit the server (as rdma-core's): it served until the client left
    assert_eq!(
        sout.lines().last(),
        Some("rping: server: 4 pings of 64 bytes; the client disconnected")
    );
}

/// Event mode (`-e`) as two processes on the UDP fabric (127.0.7.30/.31, fabric port
/// 47052): both ends wait for their completions on completion channels (-d reports waits that
/// slept there; the emulated NIC's interrupts end them), 4 KiB pings verified on both sides.
#[test]
fn event_mode_as_two_processes() {
    let common = [
        "-S",
        "4096",
        "-e",
        "-d",
        "-V",
        "--fabric-port",
        "47052",
        "--timeout",
        "20",
    ];
    let srv_args: Vec<&str> = ["-s", "-a", "127.0.7.30"]
        .into_iter()
        .chain(common)
        .collect();
    let (srv, line) = Server::start(&srv_args);
    assert!(line.contains("listening on 127.0.7.30:7174"), "{line}");
    let out = Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(["-c", "-a", "127.0.7.30", "-I", "127.0.7.31", "-C", "5"])
        .args(common)
        .output()
        .expect("run the client");
    let (status, sout, serr) = srv.finish();
    let cout = String::from_utf8_lossy(&out.stdout);
    let cerr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cout}\n{cerr}\nserver:\n{sout}\n{serr}"
    );
    assert!(status.success(), "{sout}\n{serr}");
    assert_eq!(
        cout.lines().last(),
        Some("rping: client: 5 pings of 4096 bytes, validated")
    );
    assert_eq!(
        sout.lines().last(),
        Some("rping: server: 5 pings of 4096 bytes, validated; the client disconnected")
    );
    // each side's waits slept on the channels (a positive count), none spun through
    for (side, err) in [("client", cerr.as_ref()), ("server", serr.as_str())] {
        let prefix = format!("rping: {side}: event mode, ");
        let n: u64 = err
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{side}: no event-mode line in\n{err}"));
        assert!(n > 0, "{side}: {err}");
    }
}

#[test]
fn a_client_without_a_server_times_out() {
    let out = rping(&[
        "-c",
        "-a",
        "127.0.7.23",
        "-I",
        "127.0.7.22",
        "--fabric-port",
        "47051",
        "--timeout",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("TimedOut"), "{err}");
}

/// Runs the server and the client on the two ends of an Ethernet link in QEMU's socket-netdev
/// format (127.0.0.1:48080 <-> 127.0.0.1:48081): the client finds the server by ARP on the
/// virtual wire 10.78.0.0/24, both ends verify the data (the client compares, the server
/// checks each READ against rping's pattern with -V), and the server runs until the client
/// disconnects.
#[test]
fn server_and_client_on_an_ethernet_link() {
    let (srv, line) = Server::start(&[
        "-s",
        "-a",
        "10.78.0.1",
        "--fabric",
        "eth:48080,48081",
        "-v",
        "-V",
        "--timeout",
        "30",
    ]);
    assert!(
        line.contains(
            "listening on 10.78.0.1:7174 (Ethernet link 127.0.0.1:48080 -> 127.0.0.1:48081, \
             MAC 02:00:0a:4e:00:01)"
        ),
        "{line}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(["-c", "-a", "10.78.0.1", "-I", "10.78.0.2"])
        .args(["--fabric", "eth:48081,48080", "--mac", "02:00:00:78:00:02"])
        .args(["-C", "6", "-S", "3000", "-v", "-V", "-d", "--timeout", "30"])
        .output()
        .expect("run the client");
    let (status, sout, serr) = srv.finish();
    let cout = String::from_utf8_lossy(&out.stdout);
    let cerr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cout}\n{cerr}\nserver:\n{sout}\n{serr}"
    );
    assert!(status.success(), "{sout}\n{serr}");
    // the client resolved the server's MAC by ARP (-d)
    assert!(
        cout.contains("client: 10.78.0.1 is at 02:00:0a:4e:00:01"),
        "{cout}"
    );
    let pings: Vec<&str> = cout
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert_eq!(pings.len(), 6, "{cout}");
    for (i, l) in pings.iter().enumerate() {
        assert!(l.starts_with(&format!("ping data: rdma-ping-{i}: ")), "{l}");
        assert_eq!(l.len() - "ping data: ".len(), 2999, "{l}");
    }
    assert_eq!(
        cout.lines().last(),
        Some("rping: client: 6 pings of 3000 bytes, validated")
    );
    assert!(cerr.contains("rping: client: 6 pings in "), "{cerr}");
    let seen: Vec<&str> = sout
        .lines()
        .filter_map(|l| l.strip_prefix("server "))
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert_eq!(seen, pings, "{sout}");
    assert_eq!(
        sout.lines().last(),
        Some("rping: server: 6 pings of 3000 bytes, validated; the client disconnected")
    );
}

/// A client whose server never answers ARP gives up after --timeout with a clear error.
#[test]
fn an_ethernet_client_without_a_peer_fails_arp() {
    let out = rping(&[
        "-c",
        "-a",
        "10.78.0.11",
        "-I",
        "10.78.0.12",
        "--fabric",
        "eth:48082,48083",
        "--timeout",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("client: no ARP reply from 10.78.0.11 within 1 s"),
        "{err}"
    );
}

#[test]
fn a_device_through_device_open_that_is_not_there_is_a_clear_error() {
    // A VFIO function no machine has, as server and as client: the first check that fails
    // names what to fix; EFA: this build has no provider. Nothing is pinged.
    let bdf = "0000:ff:1f.7";
    let device = format!("vfio:{bdf}");
    let vfio_want = if std::path::Path::new("/dev/vfio/vfio").exists() {
        format!("no PCI function {bdf}")
    } else {
        "VFIO is not available: /dev/vfio/vfio does not exist".to_string()
    };
    for (args, want) in [
        (
            vec!["-s", "-a", "127.0.9.2", "--device", &device],
            vfio_want.as_str(),
        ),
        (
            vec![
                "-c",
                "-a",
                "127.0.9.2",
                "-I",
                "127.0.9.1",
                "--device",
                &device,
            ],
            vfio_want.as_str(),
        ),
        (
            // device-open opens the emulated EFA; the connection manager does not take it
            // (it needs RC and a GSI QP)
            vec!["-s", "-a", "127.0.9.2", "--device", "efa"],
            "add_device: NotSupported",
        ),
    ] {
        let out = rping(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("pings"),
            "{args:?}"
        );
    }
    // The embedded mode runs two emulated NICs: --device is a usage error there.
    let out = rping(&["--device", &device]);
    assert_eq!(out.status.code(), Some(2));
}
