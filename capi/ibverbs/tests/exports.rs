//! The built `libibverbs.so`: SONAME `libibverbs.so.1`, and exactly the functions of
//! `exports.txt`, each at its rdma-core version node (no unversioned export).

#[path = "../../test-support/mod.rs"]
mod support;

#[test]
fn soname_and_versioned_exports_match_rdma_core() {
    let so = support::built("ibverbs");
    let expected = support::read_list(include_str!("../exports.txt"));
    assert!(expected.iter().all(|(v, _)| v.starts_with("IBVERBS_1.")
        || v == "IBVERBS_PRIVATE_34"
        || v == "RDMA_STACK_PRIVATE_1"));
    support::check_exports(&so, "libibverbs.so.1", &expected);
}
