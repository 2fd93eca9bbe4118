//! Debian 12's compiled rdmacm-utils (all `BIND_NOW`, downloaded at test time) run unchanged
//! on the built `librdmacm.so.1` and `libibverbs.so.1`: each pair of programs, a server and a
//! client, in two processes on this machine, each process with its own emulated NIC on the
//! UDP fabric (`RDMA_STACK_DEVICE=emu-udp:IP:PORT`). Each test has addresses and a fabric
//! port of its own, so the tests can run at the same time.

#[path = "../../test-support/mod.rs"]
mod support;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread::sleep;
use std::time::Duration;

/// Debian's rdmacm-utils binaries.
fn tools() -> PathBuf {
    let kit = guest_kit::Kit::new(guest_kit::Kit::default_cache_dir()).expect("package cache");
    kit.extract("rdmacm-utils")
        .expect("download and unpack rdmacm-utils")
        .join("usr/bin")
}

/// Both libraries installed under their SONAMEs in a fresh directory.
fn libs(tag: &str) -> PathBuf {
    let dir = support::scratch(tag);
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
    dir
}

/// A program of `bin` with our libraries and the NIC `device`, killed after 120 s.
fn tool(
    bin: &std::path::Path,
    lib: &std::path::Path,
    device: &str,
    prog: &str,
    args: &[&str],
) -> Command {
    let mut c = Command::new("timeout");
    c.arg("120")
        .arg("stdbuf")
        .arg("-oL")
        .arg(bin.join(prog))
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .env("RDMA_STACK_DEVICE", device)
        // A crash leaves its core here (where the system writes cores to the working
        // directory) for `postmortem`.
        .current_dir(lib)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only an async-signal-safe setrlimit between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &unlimited);
            Ok(())
        });
    }
    c
}

/// For a program of `exe` that died by a signal: the threads' backtraces from its core in
/// `dir` (gdb), or why there are none; empty when it did not die by a signal.
fn postmortem(dir: &std::path::Path, exe: &std::path::Path, o: &Output) -> String {
    use std::os::unix::process::ExitStatusExt;
    let Some(sig) = o.status.signal() else {
        return String::new();
    };
    let cores: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n == "core" || n.starts_with("core."))
                })
                .collect()
        })
        .unwrap_or_default();
    let Some(core) = cores.first() else {
        return format!("\nsignal {sig}: no core file in {}", dir.display());
    };
    match Command::new("gdb")
        .args(["-batch", "-nx", "-ex", "thread apply all bt 40"])
        .arg(exe)
        .arg(core)
        .output()
    {
        Ok(g) => format!(
            "\nsignal {sig}, backtraces from {}:\n{}",
            core.display(),
            String::from_utf8_lossy(&g.stdout)
        ),
        Err(e) => format!("\nsignal {sig}: core {} (gdb: {e})", core.display()),
    }
}

/// Stops a program started by [`tool`]: SIGTERM to its `timeout` wrapper, which passes it on
/// to the program (a SIGKILL would end only the wrapper and leave the program running, its
/// NIC's address taken), then waits for both.
fn stop(mut child: std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs `server` in the background, then `client` once the server listens; both outputs.
/// The server is given time to start listening: the client retries nothing, so a client run
/// that failed to connect is tried again (a few times) while the server is still up.
fn pair(mut server: Command, mut client: Command) -> (Output, Output) {
    let srv = server.spawn().expect("start the server");
    let mut out = None;
    for _ in 0..20 {
        sleep(Duration::from_millis(500));
        let o = client.output().expect("run the client");
        let (so, se) = text(&o);
        let refused = !o.status.success()
            && (se.contains("REJECTED")
                || se.contains("rejected")
                || so.contains("rejected")
                || se.contains("refused")
                || so.contains("refused")
                || se.contains("UNREACHABLE")
                // perftest's client on a REJECTED (8) or UNREACHABLE (7) event
                || se.contains("Unexpected CM event bl blka 8")
                || se.contains("Unexpected CM event bl blka 7"));
        out = Some(o);
        if !refused {
            break;
        }
    }
    let c = out.expect("client ran");
    let s = srv.wait_with_output().expect("server output");
    (s, c)
}

fn check_loader(prog: &str, o: &Output) {
    let (so, se) = text(o);
    for bad in ["symbol lookup error", "not found", "no version information"] {
        assert!(
            !so.contains(bad) && !se.contains(bad),
            "{prog}: loader: {so}{se}"
        );
    }
}

/// Asserts success and that every line of `want` is among the output's lines.
fn expect(prog: &str, o: &Output, want: &[&str]) {
    check_loader(prog, o);
    let (so, se) = text(o);
    assert!(
        o.status.success(),
        "{prog} failed ({}):\nstdout:\n{so}\nstderr:\n{se}",
        o.status
    );
    let lines: Vec<&str> = so.lines().chain(se.lines()).map(str::trim_end).collect();
    for w in want {
        assert!(
            lines.contains(w),
            "{prog}: no line {w:?} in:\nstdout:\n{so}\nstderr:\n{se}"
        );
    }
}

/// The NIC addresses (`.1` server, `.2` client) and fabric port of test `n`.
fn net(n: u8) -> (String, String, u16) {
    (
        format!("127.71.{n}.1"),
        format!("127.71.{n}.2"),
        47100 + u16::from(n),
    )
}

/// rping's server and client on the UDP fabric; `extra` options on both sides.
fn rping(tag: &str, n: u8, extra: &[&str]) {
    let (s, c, port) = net(n);
    let (sd, cd) = (format!("emu-udp:{s}:{port}"), format!("emu-udp:{c}:{port}"));
    let mut cargs = vec!["-I", c.as_str()];
    cargs.extend(extra);
    rping_on(tag, (&s, &sd), &cd, extra, &cargs);
}

/// rping's server at `s` on device `sd` and its client on device `cd`; `extra` options on
/// the server, `cextra` on the client.
fn rping_on(tag: &str, (s, sd): (&str, &str), cd: &str, extra: &[&str], cextra: &[&str]) {
    let (bin, lib) = (tools(), libs(tag));
    let mut sargs = vec!["-s", "-a", s, "-p", "7174", "-v", "-V"];
    sargs.extend(extra);
    let mut cargs = vec!["-c", "-a", s, "-p", "7174", "-v", "-V", "-C", "10"];
    cargs.extend(cextra);
    let server = tool(&bin, &lib, sd, "rping", &sargs);
    let client = tool(&bin, &lib, cd, "rping", &cargs);
    let (so, co) = pair(server, client);
    // The ten pings (64-byte buffers): "rdma-ping-N: " and 50 characters from 'A' + N on,
    // cycling through 'A'..='z'.
    let line = |prefix: &str, n: usize| {
        let chars: String = (0..50)
            .map(|i| (b'A' + ((n + i) % 58) as u8) as char)
            .collect();
        format!("{prefix}ping data: rdma-ping-{n}: {chars}")
    };
    let client_lines: Vec<String> = (0..10).map(|n| line("", n)).collect();
    let server_lines: Vec<String> = (0..10).map(|n| line("server ", n)).collect();
    let cl: Vec<&str> = client_lines.iter().map(String::as_str).collect();
    let sl: Vec<&str> = server_lines.iter().map(String::as_str).collect();
    for (side, o) in [("client", &co), ("server", &so)] {
        let pm = postmortem(&lib, &bin.join("rping"), o);
        assert!(pm.is_empty(), "rping {side} crashed:\n{}\n{pm}", text(o).0);
    }
    expect("rping -c", &co, &cl);
    let mut sw = sl.clone();
    sw.extend([
        "server DISCONNECT EVENT...",
        "wait for RDMA_READ_ADV state 10",
    ]);
    expect("rping -s", &so, &sw);
}

#[test]
fn rping_pings_ten_times_with_rdma_read_and_write() {
    rping("rping", 1, &[]);
}

/// Each process's NIC on an Ethernet link in QEMU's socket-netdev format
/// (`RDMA_STACK_DEVICE=emu-eth:IP:LOCAL,PEER`, the two ends' UDP ports crossed), on a
/// virtual wire whose addresses are not the host's: the client names no source address and
/// finds the server's MAC by ARP, the server finds the client's from the ARP request it
/// answered.
#[test]
fn rping_on_an_ethernet_link_with_arp() {
    let (s, sd, cd) = (
        "10.78.7.1",
        "emu-eth:10.78.7.1:47180,47181",
        "emu-eth:10.78.7.2:47181,47180",
    );
    rping_on("rping-eth", (s, sd), cd, &[], &[]);
}

/// `-q`: rping creates its QPs itself (`ibv_create_qp`) and moves them with
/// `rdma_init_qp_attr` + `ibv_modify_qp`; the client sees CONNECT_RESPONSE and calls
/// `rdma_establish`.
#[test]
fn rping_with_its_own_qps() {
    rping("rping-q", 8, &["-q"]);
}

#[test]
fn rdma_server_and_rdma_client_exchange_a_message_on_synchronous_endpoints() {
    let (bin, lib) = (tools(), libs("rdma-server"));
    let (s, c, port) = net(2);
    let (sd, cd) = (format!("emu-udp:{s}:{port}"), format!("emu-udp:{c}:{port}"));
    let server = tool(&bin, &lib, &sd, "rdma_server", &["-s", &s, "-p", "7471"]);
    let client = tool(&bin, &lib, &cd, "rdma_client", &["-s", &s, "-p", "7471"]);
    let (so, co) = pair(server, client);
    expect(
        "rdma_client",
        &co,
        &["rdma_client: start", "rdma_client: end 0"],
    );
    expect(
        "rdma_server",
        &so,
        &["rdma_server: start", "rdma_server: end 0"],
    );
}

#[test]
fn ucmatose_runs_several_connections() {
    let (bin, lib) = (tools(), libs("ucmatose"));
    let (s, c, port) = net(3);
    let (sd, cd) = (format!("emu-udp:{s}:{port}"), format!("emu-udp:{c}:{port}"));
    let opts = ["-c", "4", "-C", "20", "-S", "1000"];
    let mut sargs = vec!["-b", s.as_str()];
    sargs.extend(opts);
    let mut cargs = vec!["-s", s.as_str(), "-b", c.as_str()];
    cargs.extend(opts);
    let server = tool(&bin, &lib, &sd, "ucmatose", &sargs);
    let client = tool(&bin, &lib, &cd, "ucmatose", &cargs);
    let (so, co) = pair(server, client);
    expect(
        "ucmatose client",
        &co,
        &[
            "cmatose: starting client",
            "cmatose: connecting",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0",
        ],
    );
    expect(
        "ucmatose server",
        &so,
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
    );
}

#[test]
fn udaddy_exchanges_datagrams_after_sidr() {
    let (bin, lib) = (tools(), libs("udaddy"));
    let (s, c, port) = net(4);
    let (sd, cd) = (format!("emu-udp:{s}:{port}"), format!("emu-udp:{c}:{port}"));
    let server = tool(&bin, &lib, &sd, "udaddy", &["-b", &s]);
    let client = tool(&bin, &lib, &cd, "udaddy", &["-s", &s, "-b", &c]);
    let (so, co) = pair(server, client);
    expect(
        "udaddy client",
        &co,
        &[
            "udaddy: starting client",
            "udaddy: connecting",
            "initiating data transfers",
            "receiving data transfers",
            "data transfers complete",
            "test complete",
            "return status 0",
        ],
    );
    expect(
        "udaddy server",
        &so,
        &[
            "udaddy: starting server",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0",
        ],
    );
}

/// cmtime: ten connections set up and torn down step by step (its server handles requests
/// and disconnects from worker threads, and never exits: it is killed afterwards).
#[test]
fn cmtime_times_ten_connections() {
    let (bin, lib) = (tools(), libs("cmtime"));
    let (s, c, port) = net(9);
    let (sd, cd) = (format!("emu-udp:{s}:{port}"), format!("emu-udp:{c}:{port}"));
    let server = tool(&bin, &lib, &sd, "cmtime", &["-b", &s])
        .spawn()
        .expect("start the cmtime server");
    sleep(Duration::from_secs(1));
    let o = tool(&bin, &lib, &cd, "cmtime", &["-s", &s, "-b", &c, "-c", "10"])
        .output()
        .expect("run the cmtime client");
    stop(server);
    expect(
        "cmtime",
        &o,
        &[
            "creating id",
            "binding source address",
            "resolving address",
            "resolving route",
            "creating qp",
            "connecting",
            "disconnecting",
            "destroying id",
        ],
    );
    let (so, se) = text(&o);
    for row in [
        "create id",
        "bind addr",
        "resolve addr",
        "resolve route",
        "create qp",
        "connect",
        "disconnect",
        "destroy",
    ] {
        assert!(
            so.lines().any(|l| l.starts_with(row) && l.contains(':')),
            "no {row:?} row:\n{so}{se}"
        );
    }
    assert!(!so.contains("ERROR") && !se.contains("event:"), "{so}{se}");
}

/// A client connecting to a port nobody listens on (the peer's NIC is up: an rping server
/// listening on another port) is refused: the peer's connection manager answers the REQ with
/// a REJ, and the synchronous `rdma_connect` fails (ECONNREFUSED) instead of waiting.
#[test]
fn a_client_without_a_listener_is_refused() {
    let (bin, lib) = (tools(), libs("no-listener"));
    let (s, c, port) = net(5);
    let (sd, cd) = (format!("emu-udp:{s}:{port}"), format!("emu-udp:{c}:{port}"));
    let other = tool(&bin, &lib, &sd, "rping", &["-s", "-a", &s, "-p", "7174"])
        .spawn()
        .expect("start an rping server");
    sleep(Duration::from_secs(1));
    let o: Output = tool(&bin, &lib, &cd, "rdma_client", &["-s", &s, "-p", "7471"])
        .output()
        .expect("run rdma_client");
    stop(other);
    check_loader("rdma_client", &o);
    let (so, se) = text(&o);
    // Failed at the connection (not killed by the timeout).
    assert!(
        matches!(o.status.code(), Some(c) if c != 0 && c != 124),
        "{}: {so}{se}",
        o.status
    );
    assert!(so.contains("rdma_client: end -1"), "{so}{se}");
    assert!(
        so.contains("rdma_connect") || se.contains("rdma_connect"),
        "{so}{se}"
    );
}

#[test]
fn perftest_write_bandwidth_and_send_latency_over_rdma_cm() {
    let kit = guest_kit::Kit::new(guest_kit::Kit::default_cache_dir()).expect("package cache");
    let roots = kit
        .extract_all(&["perftest", "ibverbs-providers", "libibumad3", "libpci3"])
        .expect("download and unpack perftest and its libraries");
    let dir = libs("debian-perftest");
    // Ours first; then Debian's libmlx5/libefa (BIND_NOW, importing IBVERBS_PRIVATE_34 from
    // our libibverbs), libibumad and libpci.
    let mut path = vec![dir.clone()];
    path.extend(
        roots[1..]
            .iter()
            .map(|r| r.join("usr/lib/x86_64-linux-gnu")),
    );
    let path = std::env::join_paths(path).unwrap();
    let bin = roots[0].join("usr/bin");
    let (s, c, port) = net(6);
    let run = |prog: &str, device: String, args: &[&str]| {
        let mut cmd = Command::new("timeout");
        // Line-buffered, so that what a program printed before a hang is in the report.
        cmd.arg("120")
            .arg("stdbuf")
            .arg("-oL")
            .arg(bin.join(prog))
            .args(["-R", "-F", "-n", "200"])
            .args(args)
            .env("LD_LIBRARY_PATH", &path)
            .env("RDMA_STACK_DEVICE", device)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    for (prog, row) in [
        ("ib_write_bw", " 65536      200"),
        ("ib_send_lat", " 2       200"),
    ] {
        let server = run(prog, format!("emu-udp:{s}:{port}"), &[]);
        let client = run(prog, format!("emu-udp:{c}:{port}"), &[s.as_str()]);
        let (so, co) = pair(server, client);
        // The client first: a server that waited in vain failed because of it.
        for (side, o) in [("client", &co), ("server", &so)] {
            check_loader(prog, o);
            let (out, err) = text(o);
            assert!(
                o.status.success(),
                "{prog} {side}: {}\n{out}\n{err}",
                o.status
            );
            for want in [" rdma_cm QPs\t : ON", " Data ex. method : rdma_cm"] {
                assert!(
                    out.lines().any(|l| l == want),
                    "{prog} {side}: no {want:?}:\n{out}"
                );
            }
            assert!(
                out.lines().any(|l| l.starts_with(row)),
                "{prog} {side}: no result row:\n{out}\n{err}"
            );
        }
    }
}
