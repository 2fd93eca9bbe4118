//! This project's own C headers (`capi/include`): they describe the same ABI as rdma-core
//! 44's (a layout probe compiled against both prints the same), and a C program written
//! against rdma-core (`capi/examples/cm_pingpong.c`: both ends of a connection in one
//! process, event channel and completion channel fds `poll()`ed, SEND and RDMA WRITE)
//! compiles with `cc` against either header set and runs on this stack.

#[path = "../../test-support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/{name}"))
}

#[test]
fn our_headers_lay_objects_out_as_rdma_core_does() {
    let dir = support::scratch("headers-layout");
    let src = example("layout_probe.c");
    let (ours, theirs) = (dir.join("probe-ours"), dir.join("probe-rdma-core"));
    support::cc_ours(&src, &ours, &[]);
    support::cc(&src, &theirs, &[]);
    let a = support::run(&mut Command::new(&ours));
    let b = support::run(&mut Command::new(&theirs));
    assert!(a.lines().count() > 90, "{a}");
    assert_eq!(a, b, "layouts differ (ours, then rdma-core's)");
}

fn pingpong(exe: &Path, lib: &Path, device: Option<&str>, args: &[&str]) {
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib);
    match device {
        Some(d) => cmd.env("RDMA_STACK_DEVICE", d),
        None => cmd.env_remove("RDMA_STACK_DEVICE"),
    };
    let out = support::run(&mut cmd);
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "nonblocking rdma_get_cm_event: -1 Resource temporarily unavailable",
        "client: nonblocking ibv_get_cq_event: -1 Resource temporarily unavailable",
        "server: nonblocking ibv_get_cq_event: -1 Resource temporarily unavailable",
        "event: RDMA_CM_EVENT_CONNECT_REQUEST",
        "event: RDMA_CM_EVENT_ESTABLISHED",
        "server: client buffer rkey 0x1",
        "client: notice: done",
        "client: buffer: written by the server",
        "event: RDMA_CM_EVENT_DISCONNECTED (server)",
        "event: RDMA_CM_EVENT_DISCONNECTED (client)",
        "disconnected",
        "ok",
    ] {
        assert!(lines.contains(&want), "no line {want:?} in:\n{out}");
    }
}

#[test]
fn a_connection_in_one_process_built_against_our_headers() {
    let dir = support::scratch("pingpong-ours");
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
    let exe = dir.join("cm_pingpong");
    let l = format!("-L{}", dir.display());
    support::cc_ours(
        &example("cm_pingpong.c"),
        &exe,
        &[&l, "-lrdmacm", "-libverbs"],
    );
    // the default device: an emulated NIC in the process, at 127.0.0.1
    pingpong(&exe, &dir, None, &[]);
}

#[test]
fn a_connection_in_one_process_built_against_rdma_core_headers_on_the_udp_fabric() {
    let dir = support::scratch("pingpong-rdma-core");
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
    let exe = dir.join("cm_pingpong");
    let l = format!("-L{}", dir.display());
    support::cc(
        &example("cm_pingpong.c"),
        &exe,
        &[&l, "-lrdmacm", "-libverbs"],
    );
    pingpong(
        &exe,
        &dir,
        Some("emu-udp:127.71.7.1:47107"),
        &["127.71.7.1", "7999"],
    );
}
