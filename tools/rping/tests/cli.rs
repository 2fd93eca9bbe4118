//! Runs the `rping` binary (embedded, and as server and client processes) and checks its
//! output and exit status.

use std::process::{Command, Output};

fn rping(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(args)
        .output()
        .expect("run rping")
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
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let common = [
        "-C",
        "4",
        "-S",
        "64",
        "-v",
        "--fabric-port",
        "47050",
        "--timeout",
        "20",
    ];
    let mut srv = Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(["-s", "-a", "127.0.7.20"])
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut err = BufReader::new(srv.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("server stderr");
    assert!(
        line.contains("listening on 127.0.7.20:7174 (fabric UDP port 47050)"),
        "{line}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(["-c", "-a", "127.0.7.20", "-I", "127.0.7.21", "-V"])
        .args(common)
        .output()
        .expect("run the client");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = srv.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = srv.kill();
            panic!("the server did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut sout = String::new();
    srv.stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut sout)
        .expect("server stdout");
    let mut serr = String::new();
    err.read_to_string(&mut serr).expect("server stderr");
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
    assert_eq!(
        sout.lines().last(),
        Some("rping: server: 4 pings of 64 bytes")
    );
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
