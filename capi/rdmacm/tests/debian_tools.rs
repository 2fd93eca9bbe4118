//! Debian 12's compiled rdmacm-utils (rping, ucmatose, udaddy, rdma_server, rdma_client,
//! cmtime, mckey; all `BIND_NOW`) load against the built `librdmacm.so.1` and
//! `libibverbs.so.1`: every import resolves at its version, and each program gets as far as
//! its first connection-manager call, which fails cleanly (not implemented yet).

#[path = "../../test-support/mod.rs"]
mod support;

use std::process::Command;

#[test]
fn debian_rdmacm_utils_load_and_stop_at_their_first_cm_call() {
    let kit = guest_kit::Kit::new(guest_kit::Kit::default_cache_dir()).expect("package cache");
    let bin = kit
        .extract("rdmacm-utils")
        .expect("download and unpack rdmacm-utils")
        .join("usr/bin");
    let dir = support::scratch("debian-tools");
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
    let runs: [(&str, &[&str]); 8] = [
        ("rping", &["-s", "-a", "127.0.0.1", "-p", "7174"]),
        ("rping", &["-c", "-a", "127.0.0.1", "-p", "7174", "-C", "1"]),
        ("ucmatose", &["-b", "127.0.0.1"]),
        ("udaddy", &["-b", "127.0.0.1"]),
        ("rdma_server", &["-s", "127.0.0.1", "-p", "7471"]),
        ("rdma_client", &["-s", "127.0.0.1", "-p", "7471"]),
        ("cmtime", &["-b", "127.0.0.1"]),
        ("mckey", &["-m", "239.1.1.1", "-b", "127.0.0.1"]),
    ];
    for (prog, args) in runs {
        let out = Command::new("timeout")
            .arg("20")
            .arg(bin.join(prog))
            .args(args)
            .env("LD_LIBRARY_PATH", &dir)
            .output()
            .expect("run the tool");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let all = format!("{stdout}{stderr}");
        for bad in ["symbol lookup error", "not found", "no version information"] {
            assert!(!all.contains(bad), "{prog} {args:?}: loader: {all}");
        }
        // Started (not killed by the timeout, no signal) and failed at a library call.
        assert!(
            matches!(out.status.code(), Some(c) if c != 0 && c != 124),
            "{prog} {args:?}: {} {all}",
            out.status
        );
    }
}

#[test]
fn debian_perftest_loads_with_the_real_providers_and_stops_at_the_cm() {
    let kit = guest_kit::Kit::new(guest_kit::Kit::default_cache_dir()).expect("package cache");
    let roots = kit
        .extract_all(&["perftest", "ibverbs-providers", "libibumad3", "libpci3"])
        .expect("download and unpack perftest and its libraries");
    let dir = support::scratch("debian-perftest");
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
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
    let runs: [(&str, &[&str]); 2] = [
        ("ib_send_lat", &["-R", "-F", "-n", "10"]),
        ("ib_write_bw", &["-R", "-F", "-n", "10", "127.0.0.1"]),
    ];
    for (prog, args) in runs {
        let out = Command::new("timeout")
            .arg("20")
            .arg(bin.join(prog))
            .args(args)
            .env("LD_LIBRARY_PATH", &path)
            .output()
            .expect("run perftest");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for bad in ["symbol lookup error", "not found", "no version information"] {
            assert!(!all.contains(bad), "{prog}: loader: {all}");
        }
        // Device list, open and queries passed; the connection manager is next.
        assert!(
            all.contains("rdma_create_event_channel failed"),
            "{prog}: {all}"
        );
        assert_eq!(out.status.code(), Some(1), "{prog}: {all}");
    }
}
