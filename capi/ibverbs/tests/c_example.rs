//! `capi/examples/devinfo.c`, compiled with `cc` against rdma-core 44's headers and linked
//! against the built `libibverbs.so.1`, run with `LD_LIBRARY_PATH` on each kind of emulated
//! device `RDMA_STACK_DEVICE` names.

#[path = "../../test-support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Builds devinfo once per test (own scratch directory); its path and library directory.
fn build(tag: &str) -> (PathBuf, PathBuf) {
    let dir = support::scratch(tag);
    support::install(&dir, "ibverbs");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/devinfo.c");
    let exe = dir.join("devinfo");
    let l = format!("-L{}", dir.display());
    support::cc(&src, &exe, &[&l, "-libverbs"]);
    (exe, dir)
}

fn run(exe: &Path, lib_dir: &Path, device: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", lib_dir);
    match device {
        Some(d) => cmd.env("RDMA_STACK_DEVICE", d),
        None => cmd.env_remove("RDMA_STACK_DEVICE"),
    };
    cmd.output().expect("run devinfo")
}

/// The `key: value` lines of a successful run.
fn lines(out: &Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "devinfo failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().map(str::to_string).collect()
}

fn has(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l == want),
        "no line '{want}' in:\n{}",
        lines.join("\n")
    );
}

fn check_common(l: &[String]) {
    for want in [
        "devices: 1",
        "name: mlx5_0",
        "transport_type: 0",
        "phys_port_cnt: 1",
        "port_state: 4",
        "link_layer: 2",
        "legacy_query_port: ok",
        "query_port_7: error",
        "gid0_type: 2",
        "pkey0: 0xffff",
        "pd: ok",
        "create_cq: created, cqe >= 16",
        "create_srq: Function not implemented",
        "ok",
    ] {
        has(l, want);
    }
    let fw = l
        .iter()
        .find_map(|s| s.strip_prefix("fw_ver: "))
        .expect("fw_ver line");
    assert!(fw.split('.').count() == 3, "fw_ver {fw}");
    let max_qp: i64 = l
        .iter()
        .find_map(|s| s.strip_prefix("max_qp: "))
        .and_then(|v| v.parse().ok())
        .expect("max_qp line");
    assert!(max_qp > 0);
}

#[test]
fn the_program_links_to_the_rdma_core_symbol_versions() {
    let (exe, _) = build("devinfo-link");
    let dynamic = support::run(Command::new("readelf").arg("-d").arg(&exe));
    assert!(
        dynamic.contains("Shared library: [libibverbs.so.1]"),
        "{dynamic}"
    );
    let versions = support::run(Command::new("readelf").arg("-V").arg(&exe));
    for v in ["IBVERBS_1.1", "IBVERBS_1.11"] {
        assert!(
            versions.contains(&format!("Name: {v} ")),
            "{v} not required:\n{versions}"
        );
    }
}

#[test]
fn devinfo_on_the_default_in_process_nic() {
    let (exe, dir) = build("devinfo-default");
    let l = lines(&run(&exe, &dir, None));
    check_common(&l);
    has(&l, "gid0: ::ffff:127.0.0.1");
    // The node GUID is the EUI-64 of the emulated NIC's MAC (02:00:127.0.0.1).
    has(&l, "node_guid: 00007ffffe000001");
}

#[test]
fn devinfo_on_an_in_process_nic_at_another_address() {
    let (exe, dir) = build("devinfo-emu-ip");
    let l = lines(&run(&exe, &dir, Some("emu:127.0.0.7")));
    check_common(&l);
    has(&l, "gid0: ::ffff:127.0.0.7");
}

#[test]
fn devinfo_on_a_nic_on_the_udp_fabric() {
    let (exe, dir) = build("devinfo-udp");
    // A fabric port of this test's own (the NIC binds 127.0.0.9 on it).
    let port = 20000 + std::process::id() % 20000;
    let l = lines(&run(&exe, &dir, Some(&format!("emu-udp:127.0.0.9:{port}"))));
    check_common(&l);
    has(&l, "gid0: ::ffff:127.0.0.9");
}

#[test]
fn a_bad_device_spec_lists_no_device_and_says_why() {
    let (exe, dir) = build("devinfo-bad");
    let out = run(&exe, &dir, Some("mlx5_0"));
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("devices: 0"), "{stdout}");
    assert!(stderr.contains("RDMA_STACK_DEVICE=mlx5_0"), "{stderr}");
    assert!(stderr.contains("no RDMA devices"), "{stderr}");
}
