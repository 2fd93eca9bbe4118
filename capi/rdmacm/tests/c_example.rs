//! `capi/examples/addrinfo.c`, compiled with `cc` against rdma-core 44's headers and linked
//! against the built `librdmacm.so.1`, run with `LD_LIBRARY_PATH`.

#[path = "../../test-support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;

#[test]
fn rdma_getaddrinfo_answers_as_librdmacm_does() {
    let dir = support::scratch("addrinfo");
    support::install(&dir, "rdmacm");
    support::install(&dir, "ibverbs");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/addrinfo.c");
    let exe = dir.join("addrinfo");
    let l = format!("-L{}", dir.display());
    support::cc(&src, &exe, &[&l, "-lrdmacm"]);

    let versions = support::run(Command::new("readelf").arg("-V").arg(&exe));
    assert!(versions.contains("Name: RDMACM_1.0 "), "{versions}");

    let out = support::run(Command::new(&exe).env("LD_LIBRARY_PATH", &dir));
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        // RAI_PASSIVE: the address is the source; RC for the TCP port space.
        "passive: src 127.0.0.1:7471 dst none qp_type 2 ps 0x106 next no",
        "active: src none dst 127.0.0.1:7471 qp_type 2 ps 0x106 next no",
        // The hints' source address is copied; UD for the UDP port space.
        "udp_with_src: src 127.0.0.2:0 dst 127.0.0.1:7174 qp_type 4 ps 0x111 next no",
        // The resolver's EAI code comes back as is.
        "bad_host: error Name or service not known",
        "ipv6: error ai_family not supported",
        "event_str: RDMA_CM_EVENT_ESTABLISHED UNKNOWN EVENT",
        "event_channel: created",
        "ok",
    ] {
        assert!(lines.contains(&want), "no line '{want}' in:\n{out}");
    }
}
