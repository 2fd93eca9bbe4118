//! Every struct of `capi-abi` against the C compiler's view of rdma-core 44's headers
//! (Debian 12's `libibverbs-dev` / `librdmacm-dev`, downloaded at test time): a C program
//! generated here prints `sizeof`, `_Alignof`, and `offsetof` plus size of every listed field,
//! and the value of every listed constant; the test compares each with Rust's
//! (`size_of`, `align_of`, `offset_of!`). Any field that moves, grows or shrinks fails it.

// Field projections through unions need `unsafe`; the others then warn about it.
#![allow(unused_unsafe)]

#[path = "../../test-support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};

use capi_abi::ibv::*;
use capi_abi::rdmacm::*;

/// Size of the type a field projection points to (the closure is never called).
fn field_size<T, F>(_: impl Fn(&T) -> *const F) -> usize {
    size_of::<F>()
}

/// One field: its C path, Rust offset and size.
struct Field {
    c: String,
    offset: usize,
    size: usize,
}

/// One type: its C spelling, Rust size and alignment, fields.
struct Type {
    c: &'static str,
    size: usize,
    align: usize,
    fields: Vec<Field>,
}

macro_rules! c_path {
    ($($f:ident).+ ;) => {
        [$(stringify!($f)),+].join(".")
    };
    ($($f:ident).+ ; $c:literal) => {
        $c.to_string()
    };
}

/// `ty!(rust_type = "struct c_type" { field, a.b, rust.path => "c.path", ... })`.
macro_rules! ty {
    ($t:ty = $c:literal { $( $($f:ident).+ $(=> $cf:literal)? ),* $(,)? }) => {
        Type {
            c: $c,
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$(Field {
                c: c_path!($($f).+ ; $($cf)?),
                offset: offset_of!($t, $($f).+),
                // SAFETY: only a raw pointer to the field is formed (through unions too); the
                // closure is never called.
                size: field_size(|x: &$t| unsafe { &raw const x.$($f).+ }),
            }),*],
        }
    };
}

/// `(name, value)` of each constant.
macro_rules! consts {
    ($($n:ident),* $(,)?) => {
        vec![$((stringify!($n), $n as i64)),*]
    };
}

fn types() -> Vec<Type> {
    vec![
        ty!(ibv_gid = "union ibv_gid" { raw, global.subnet_prefix, global.interface_id }),
        ty!(ibv_device = "struct ibv_device" {
            _ops, _ops._dummy1, _ops._dummy2, node_type, transport_type, name, dev_name,
            dev_path, ibdev_path,
        }),
        ty!(ibv_context_ops = "struct ibv_context_ops" {
            _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
            _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
            _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
            _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
            _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
            _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
            _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast,
            _compat_async_event,
        }),
        ty!(ibv_context = "struct ibv_context" {
            device, ops, ops.poll_cq, ops.req_notify_cq, ops.post_srq_recv, ops.post_send,
            ops.post_recv, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat,
        }),
        ty!(verbs_context = "struct verbs_context" {
            query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
            create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
            modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
            modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
            post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
            create_wq, query_rt_values, create_cq_ex, priv_ => "priv", query_device_ex,
            ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp,
            create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd,
            _ABI_placeholder3, sz, context, context.abi_compat,
        }),
        ty!(ibv_pd = "struct ibv_pd" { context, handle }),
        ty!(ibv_mr = "struct ibv_mr" { context, pd, addr, length, handle, lkey, rkey }),
        ty!(ibv_comp_channel = "struct ibv_comp_channel" { context, fd, refcnt }),
        ty!(ibv_cq = "struct ibv_cq" {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed,
        }),
        ty!(ibv_qp = "struct ibv_qp" {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed,
        }),
        ty!(ibv_srq = "struct ibv_srq" {
            context, srq_context, pd, handle, mutex, cond, events_completed,
        }),
        ty!(ibv_ah = "struct ibv_ah" { context, pd, handle }),
        ty!(ibv_sge = "struct ibv_sge" { addr, length, lkey }),
        ty!(ibv_wc = "struct ibv_wc" {
            wr_id, status, opcode, vendor_err, byte_len, imm.imm_data => "imm_data",
            imm.invalidated_rkey => "invalidated_rkey", qp_num, src_qp, wc_flags, pkey_index,
            slid, sl, dlid_path_bits,
        }),
        ty!(ibv_send_wr = "struct ibv_send_wr" {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm.imm_data => "imm_data",
            imm.invalidate_rkey => "invalidate_rkey", wr, wr.rdma, wr.rdma.remote_addr,
            wr.rdma.rkey, wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add,
            wr.atomic.swap, wr.atomic.rkey, wr.ud, wr.ud.ah, wr.ud.remote_qpn,
            wr.ud.remote_qkey, qp_type, qp_type.xrc.remote_srqn,
            ext.bind_mw => "bind_mw", ext.bind_mw.mw => "bind_mw.mw",
            ext.bind_mw.rkey => "bind_mw.rkey", ext.bind_mw.bind_info => "bind_mw.bind_info",
            ext.tso => "tso", ext.tso.hdr => "tso.hdr", ext.tso.hdr_sz => "tso.hdr_sz",
            ext.tso.mss => "tso.mss",
        }),
        ty!(ibv_mw_bind_info = "struct ibv_mw_bind_info" { mr, addr, length, mw_access_flags }),
        ty!(ibv_recv_wr = "struct ibv_recv_wr" { wr_id, next, sg_list, num_sge }),
        ty!(ibv_qp_cap = "struct ibv_qp_cap" {
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
        }),
        ty!(ibv_qp_init_attr = "struct ibv_qp_init_attr" {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
        }),
        ty!(ibv_global_route = "struct ibv_global_route" {
            dgid, flow_label, sgid_index, hop_limit, traffic_class,
        }),
        ty!(ibv_ah_attr = "struct ibv_ah_attr" {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num,
        }),
        ty!(ibv_qp_attr = "struct ibv_qp_attr" {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
            dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit,
        }),
        ty!(ibv_port_attr = "struct ibv_port_attr" {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
            bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
            subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
            link_layer, flags, port_cap_flags2,
        }),
        ty!(ibv_device_attr = "struct ibv_device_attr" {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
        }),
        ty!(ibv_gid_entry = "struct ibv_gid_entry" {
            gid, gid_index, port_num, gid_type, ndev_ifindex,
        }),
        ty!(ibv_async_event = "struct ibv_async_event" {
            element, element.cq, element.qp, element.srq, element.wq, element.port_num,
            event_type,
        }),
        ty!(ibv_srq_attr = "struct ibv_srq_attr" { max_wr, max_sge, srq_limit }),
        ty!(ibv_srq_init_attr = "struct ibv_srq_init_attr" { srq_context, attr }),
        ty!(ibv_grh = "struct ibv_grh" {
            version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid,
        }),
        ty!(rdma_event_channel = "struct rdma_event_channel" { fd }),
        ty!(rdma_ib_addr = "struct rdma_ib_addr" { sgid, dgid, pkey }),
        ty!(rdma_addr = "struct rdma_addr" {
            src.addr => "src_addr", src.sin => "src_sin", src.sin6 => "src_sin6",
            src.storage => "src_storage", dst.addr => "dst_addr", dst.sin => "dst_sin",
            dst.sin6 => "dst_sin6", dst.storage => "dst_storage", addr, addr.ibaddr,
        }),
        ty!(rdma_route = "struct rdma_route" { addr, path_rec, num_paths }),
        ty!(rdma_cm_id = "struct rdma_cm_id" {
            verbs, channel, context, qp, route, route.addr.src.addr => "route.addr.src_addr",
            route.addr.dst.addr => "route.addr.dst_addr", route.addr.addr.ibaddr.sgid,
            route.addr.addr.ibaddr.dgid, route.addr.addr.ibaddr.pkey, route.path_rec,
            route.num_paths, ps, port_num, event, send_cq_channel, send_cq, recv_cq_channel,
            recv_cq, srq, pd, qp_type,
        }),
        ty!(rdma_conn_param = "struct rdma_conn_param" {
            private_data, private_data_len, responder_resources, initiator_depth,
            flow_control, retry_count, rnr_retry_count, srq, qp_num,
        }),
        ty!(rdma_ud_param = "struct rdma_ud_param" {
            private_data, private_data_len, ah_attr, qp_num, qkey,
        }),
        ty!(rdma_cm_event = "struct rdma_cm_event" {
            id, listen_id, event, status, param, param.conn, param.ud, param.ud.ah_attr,
            param.ud.qp_num, param.ud.qkey,
        }),
        ty!(rdma_addrinfo = "struct rdma_addrinfo" {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len,
            ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len,
            ai_route, ai_connect_len, ai_connect, ai_next,
        }),
        ty!(rdma_cm_join_mc_attr_ex = "struct rdma_cm_join_mc_attr_ex" {
            comp_mask, join_flags, addr,
        }),
    ]
}

fn constants() -> Vec<(&'static str, i64)> {
    consts!(
        IBV_NODE_UNKNOWN,
        IBV_NODE_CA,
        IBV_NODE_RNIC,
        IBV_TRANSPORT_UNKNOWN,
        IBV_TRANSPORT_IB,
        IBV_TRANSPORT_IWARP,
        IBV_ATOMIC_NONE,
        IBV_ATOMIC_HCA,
        IBV_ATOMIC_GLOB,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_GID_TYPE_IB,
        IBV_GID_TYPE_ROCE_V1,
        IBV_GID_TYPE_ROCE_V2,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QPT_RAW_PACKET,
        IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV,
        IBV_QPT_DRIVER,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED,
        IBV_MIG_REARM,
        IBV_MIG_ARMED,
        IBV_QP_STATE,
        IBV_QP_CUR_STATE,
        IBV_QP_EN_SQD_ASYNC_NOTIFY,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_ALT_PATH,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_PATH_MIG_STATE,
        IBV_QP_CAP,
        IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_BIND_MW,
        IBV_WR_SEND_WITH_INV,
        IBV_WR_TSO,
        IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE,
        IBV_SEND_SIGNALED,
        IBV_SEND_SOLICITED,
        IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_WC_SUCCESS,
        IBV_WC_LOC_LEN_ERR,
        IBV_WC_LOC_QP_OP_ERR,
        IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR,
        IBV_WC_MW_BIND_ERR,
        IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR,
        IBV_WC_REM_INV_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR,
        IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR,
        IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR,
        IBV_WC_GENERAL_ERR,
        IBV_WC_SEND,
        IBV_WC_RDMA_WRITE,
        IBV_WC_RDMA_READ,
        IBV_WC_COMP_SWAP,
        IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW,
        IBV_WC_LOCAL_INV,
        IBV_WC_TSO,
        IBV_WC_ATOMIC_WRITE,
        IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM,
        IBV_WC_GRH,
        IBV_WC_WITH_IMM,
        IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_MW_BIND,
        IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND,
        IBV_ACCESS_RELAXED_ORDERING,
        IBV_ACCESS_OPTIONAL_RANGE,
        IBV_EVENT_CQ_ERR,
        IBV_EVENT_QP_FATAL,
        IBV_EVENT_QP_REQ_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST,
        IBV_EVENT_SQ_DRAINED,
        IBV_EVENT_PATH_MIG,
        IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL,
        IBV_EVENT_PORT_ACTIVE,
        IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE,
        IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE,
        IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_GID_CHANGE,
        IBV_EVENT_WQ_FATAL,
        IBV_QP_INIT_ATTR_PD,
        IBV_QP_INIT_ATTR_XRCD,
        IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB,
        IBV_SYSFS_NAME_MAX,
        IBV_SYSFS_PATH_MAX,
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RDMA_CM_EVENT_ADDR_ERROR,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE,
        RDMA_CM_EVENT_CONNECT_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL,
        RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR,
        RDMA_CM_EVENT_ADDR_CHANGE,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB,
        RDMA_PS_TCP,
        RDMA_PS_UDP,
        RDMA_PS_IB,
        RAI_PASSIVE,
        RAI_NUMERICHOST,
        RAI_NOROUTE,
        RAI_FAMILY,
        RDMA_OPTION_ID,
        RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS,
        RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT,
        RDMA_OPTION_IB_PATH,
        RDMA_UDP_QKEY,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
    )
}

/// The C program printing the compiler's view of every type, field and constant.
fn c_program(types: &[Type], consts: &[(&str, i64)]) -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
         #include <rdma/rdma_cma.h>\nint main(void)\n{\n",
    );
    for t in types {
        let c = t.c;
        writeln!(
            s,
            "\tprintf(\"T|{c}|%zu|%zu\\n\", sizeof({c}), _Alignof({c}));"
        )
        .unwrap();
        for f in &t.fields {
            let p = &f.c;
            writeln!(
                s,
                "\tprintf(\"F|{c}|{p}|%zu|%zu\\n\", offsetof({c}, {p}), sizeof((({c} *)0)->{p}));"
            )
            .unwrap();
        }
    }
    for (n, _) in consts {
        writeln!(s, "\tprintf(\"C|{n}|%lld\\n\", (long long)({n}));").unwrap();
    }
    s.push_str("\treturn 0;\n}\n");
    s
}

#[test]
fn every_struct_field_and_constant_matches_rdma_core_44_headers() {
    let types = types();
    let consts = constants();
    let dir = support::scratch("layout");
    let src = dir.join("layout.c");
    std::fs::write(&src, c_program(&types, &consts)).unwrap();
    let exe = dir.join("layout");
    support::cc(&src, &exe, &[]);
    let out = support::run(&mut std::process::Command::new(&exe));

    // Keyed by kind and name: "T|type" -> "size|align", "F|type|field" -> "offset|size",
    // "C|name" -> "value".
    let c: BTreeMap<String, String> = out
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split('|').collect();
            let n = match parts.first() {
                Some(&"T") | Some(&"C") => 2,
                Some(&"F") => 3,
                _ => return None,
            };
            Some((parts[..n].join("|"), parts[n..].join("|")))
        })
        .collect();
    let mut bad = Vec::new();
    let mut checked = 0;
    let mut check = |key: String, rust: String| {
        checked += 1;
        match c.get(&key) {
            Some(v) if *v == rust => {}
            other => bad.push(format!("{key}: C {other:?}, Rust {rust}")),
        }
    };
    for t in &types {
        check(format!("T|{}", t.c), format!("{}|{}", t.size, t.align));
        for f in &t.fields {
            check(
                format!("F|{}|{}", t.c, f.c),
                format!("{}|{}", f.offset, f.size),
            );
        }
    }
    for (n, v) in &consts {
        check(format!("C|{n}"), v.to_string());
    }
    assert!(
        bad.is_empty(),
        "{} of {checked} checks differ from rdma-core 44:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // The legacy ibv_query_port fills everything before port_cap_flags2.
    assert_eq!(
        offset_of!(ibv_port_attr, port_cap_flags2),
        IBV_PORT_ATTR_LEGACY_LEN
    );
    assert!(checked > 400, "only {checked} checks");
}
