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
