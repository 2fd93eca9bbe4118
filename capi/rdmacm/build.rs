//! Links `librdmacm.so` with rdma-core's SONAME and version nodes: the map only declares the
//! nodes (rustc's own version script names the exports); each function is bound to its node
//! by an assembler `.symver` beside it (`versioned!` in `src/lib.rs`).

fn main() {
    let dir = env!("CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed={dir}/rdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/rdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
}
