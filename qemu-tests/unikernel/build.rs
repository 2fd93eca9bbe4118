//! Link arguments for the kernel image only (`rustc-link-arg-bin`): no C runtime, static,
//! not position independent (the 32-bit entry uses absolute addresses), our linker script.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let bin = "rdma-unikernel";
    for arg in [
        "-nostdlib".to_string(),
        "-static".to_string(),
        "-no-pie".to_string(),
        format!("-Wl,-T,{dir}/linker.ld"),
        "-Wl,-z,max-page-size=0x1000".to_string(),
        "-Wl,--build-id=none".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bin={bin}={arg}");
    }
    println!("cargo:rerun-if-changed=linker.ld");
    println!("cargo:rerun-if-changed=src/boot.S");
    println!("cargo:rerun-if-changed=build.rs");
}
