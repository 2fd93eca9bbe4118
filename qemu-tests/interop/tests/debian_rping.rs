//! Debian's compiled `rping` (rdmacm-utils, downloaded at test time) on the host, running
//! unchanged on this project's `libibverbs.so.1` and `librdmacm.so.1` (`LD_LIBRARY_PATH`),
//! against the soft-RoCE guest's unmodified `rping` over the Ethernet link: the host
//! process's NIC is `RDMA_STACK_DEVICE=emu-eth:IP:LOCAL,PEER`, an emulated ConnectX on the
//! host end of QEMU's socket netdev.
//!
//! One guest boot serves both directions ([`Mode::ServerThenClient`]): the guest's
//! `rping -s` for the host's `rping -c`, then the guest's `rping -c` for the host's
//! `rping -s` (a second host process, at another address on the wire so that the guest's
//! ping finds the new server and not the client that has just left the link).

#[path = "../../../capi/test-support/mod.rs"]
mod support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use interop::guest::{self, GUEST_IP, Guest, HOST_IP, Mode};
use interop::tools::ping_text;

/// The host's server on the wire (the host's client is at [`HOST_IP`]).
const HOST_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// Our end of the link; QEMU's is the next port.
const LINK_PORT: u16 = 48110;

fn sa(p: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)
}

/// Debian's rdmacm-utils programs (the guest's own package, unpacked for the host).
fn debian_bin() -> PathBuf {
    let kit = guest_kit::Kit::new(guest_kit::Kit::default_cache_dir()).expect("package cache");
    kit.extract("rdmacm-utils")
        .expect("download and unpack rdmacm-utils")
        .join("usr/bin")
}

/// The libraries this build made, under their SONAMEs in a fresh directory.
fn our_libs() -> PathBuf {
    let dir = support::scratch("interop-debian-rping");
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
    dir
}

/// Debian's `rping` with `args` on our libraries, its NIC at `ip` on the link; killed after
/// 150 s.
fn rping(bin: &Path, lib: &Path, ip: Ipv4Addr, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "150", "stdbuf", "-oL"])
        .arg(bin.join("rping"))
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .env(
            "RDMA_STACK_DEVICE",
            format!("emu-eth:{ip}:{LINK_PORT},{}", LINK_PORT + 1),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The serial output with long lines cut, for failure messages.
fn short(out: &str) -> String {
    out.lines()
        .map(|l| l.chars().take(160).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// rping's `-v` lines for `n` pings of its default 64 bytes, `prefix` before each.
fn ping_lines(prefix: &str, n: u32) -> Vec<String> {
    (0..n)
        .map(|i| format!("{prefix}ping data: {}", ping_text(i, 64)))
        .collect()
}

/// The lines of `out` that start with `prefix` (trailing blanks and `\r` trimmed).
fn lines_with<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with(prefix))
        .collect()
}

/// Asserts a host rping exited 0 without loader trouble; its (stdout, stderr).
fn host_ok(what: &str, o: &Output, serial: &str) -> (String, String) {
    let (so, se) = text(o);
    for bad in ["symbol lookup error", "not found", "no version information"] {
        assert!(
            !so.contains(bad) && !se.contains(bad),
            "{what}: loader: {so}{se}"
        );
    }
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{so}\nstderr:\n{se}\nserial:\n{}",
        o.status,
        short(serial)
    );
    (so, se)
}

#[test]
fn debian_rping_on_our_libraries_against_the_guests_rping_both_ways() {
    let (bin, lib) = (debian_bin(), our_libs());
    let image = guest::build().expect("guest image");
    let serial =
        std::env::temp_dir().join(format!("interop-debian-rping-{}.log", std::process::id()));
    let mut g = Guest::boot(
        &image,
        &Mode::ServerThenClient {
            count: 10,
            peer: HOST_SERVER_IP,
        },
        sa(LINK_PORT),
        sa(LINK_PORT + 1),
        &serial,
    )
    .expect("boot the guest");
    g.wait_for("rping server listening", Duration::from_secs(150))
        .expect("the guest's rping server");

    // 1. the host's client (no source address: the stack's one NIC; the guest's MAC by ARP)
    let guest_ip = GUEST_IP.to_string();
    let t0 = Instant::now();
    let co = rping(
        &bin,
        &lib,
        HOST_IP,
        &["-c", "-a", &guest_ip, "-C", "10", "-v"],
    )
    .output()
    .expect("run the host's rping -c");
    let client_took = t0.elapsed();
    let (cout, _) = host_ok("host rping -c", &co, &g.output());
    assert_eq!(
        lines_with(&cout, "ping data: "),
        ping_lines("", 10),
        "host rping -c:\n{cout}"
    );
    g.wait_for("rping server rc=", Duration::from_secs(60))
        .expect("the guest's server ends");

    // 2. the host's server, a new process on the link; the guest's client finds it by ping
    let srv_ip = HOST_SERVER_IP.to_string();
    let t1 = Instant::now();
    let server = rping(
        &bin,
        &lib,
        HOST_SERVER_IP,
        &["-s", "-a", &srv_ip, "-v", "-V"],
    )
    .spawn()
    .expect("start the host's rping -s");
    let out_g = match g.finish(Duration::from_secs(240)) {
        Ok(o) => o,
        Err(e) => {
            let _ = Command::new("kill").arg(server.id().to_string()).status();
            let so = server.wait_with_output().expect("host rping -s output");
            let (a, b) = text(&so);
            panic!("guest: {e}\nhost rping -s:\n{a}{b}");
        }
    };
    let so = server.wait_with_output().expect("host rping -s output");
    let server_took = t1.elapsed();
    let (sout, serr) = host_ok("host rping -s", &so, &out_g);

    // the guest's server: the host client's ten pings, then its disconnect
    assert_eq!(
        lines_with(&out_g, "server ping data: "),
        ping_lines("server ", 10),
        "guest:\n{}",
        short(&out_g)
    );
    assert!(
        out_g.contains("server DISCONNECT EVENT"),
        "{}",
        short(&out_g)
    );
    assert!(out_g.contains("rping server rc=0"), "{}", short(&out_g));
    // the guest's client: ten pings validated against what the host's server wrote back
    assert_eq!(
        lines_with(&out_g, "ping data: "),
        ping_lines("", 10),
        "guest:\n{}",
        short(&out_g)
    );
    assert!(!out_g.contains("data mismatch"), "{}", short(&out_g));
    assert!(out_g.contains("rping client rc=0"), "{}", short(&out_g));
    // the host's server: the guest client's ten pings, then its disconnect
    let all: Vec<&str> = sout
        .lines()
        .chain(serr.lines())
        .map(str::trim_end)
        .collect();
    assert_eq!(
        lines_with(&sout, "server ping data: "),
        ping_lines("server ", 10),
        "host rping -s:\n{sout}{serr}"
    );
    assert!(
        all.contains(&"server DISCONNECT EVENT..."),
        "host rping -s:\n{sout}{serr}"
    );
    let runs = lines_with(&out_g, "INTEROP")
        .into_iter()
        .filter(|l| l.contains("rping client run"))
        .count();
    eprintln!(
        "interop figures: host rping -c (10 pings) start to exit {client_took:?}; host \
         rping -s start to exit {server_took:?} (includes the guest's wait for it and its \
         client: {runs} run(s))"
    );
}
