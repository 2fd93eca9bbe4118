//! `libibverbs.so.1` for C programs compiled against rdma-core 44 (Debian 12): the same
//! SONAME, symbol versions (`IBVERBS_1.0` .. `IBVERBS_1.14`, `IBVERBS_PRIVATE_34`) and object
//! layouts ([`capi_abi::ibv`]), served by this stack's providers.
//!
//! The device is the one `RDMA_STACK_DEVICE` names ([`backend::Spec`]: an emulated mlx5 NIC
//! in this process by default, `emu-udp:IP[:PORT]` on the UDP fabric, `emu-eth:IP:LOCAL,PEER`
//! on an Ethernet link in QEMU's socket-netdev format (a guest's NIC at the other end),
//! `vfio:BDF@IP` a real ConnectX); `ibv_get_device_list` lists it as `mlx5_0`, and every context opened on it
//! shares one probed device, opened on first use and kept until the process exits.
//!
//! The library holds the process's one stack ([`stack`]): the device, a connection
//! manager over it (whose `rdma_*` calls `librdmacm.so.1` forwards here, through the
//! `rdma_stack_*` entry points of node `RDMA_STACK_PRIVATE_1`) and a progress thread. Working:
//! the device list and queries, PDs, MRs on the program's own memory, completion channels
//! (pollable eventfds), CQs, QPs (the connection manager's and the program's own, RC and UD),
//! AHs, and the data-path slots of the context's ops table (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`). SRQs, multicast and the extended QP API answer
//! `ENOSYS` (NULL with errno, a positive errno, or -1 with errno, as each call reports
//! errors).
//!
//! Each export is bound to its version node by an assembler `.symver` placed right after the
//! function ([`versioned!`]); `ibverbs.map` only declares the nodes.

#![allow(non_camel_case_types)]

pub mod backend;

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::{self, null_mut};
use std::sync::{Arc, OnceLock};

use capi_abi::ibv::*;
use libc::{EINVAL, ENODEV, ENOMEM, ENOSYS};

use backend::{Backend, DEVICE_ENV, Spec};

pub mod stack;

/// Binds the exported function `$name` to version node `$ver` (`NAME@@@NODE`: the default
/// version). Keep it in the module that defines the function.
macro_rules! versioned {
    ($ver:literal, $name:ident) => {
        core::arch::global_asm!(concat!(
            ".symver ",
            stringify!($name),
            ", ",
            stringify!($name),
            "@@@",
            $ver
        ));
    };
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: glibc's per-thread errno location is always valid for the calling thread.
    unsafe { *libc::__errno_location() = e };
}

// ---------------------------------------------------------------------------------------------
// The device list.

/// One listed device: its `ibv_device` (handed to C, never freed) and what opens it.
struct Listed {
    dev: *mut ibv_device,
    spec: Spec,
}

// SAFETY: `dev` points to a leaked, never-freed `ibv_device` that this library never writes
// after creating it; sharing the address between threads is what C callers do anyway.
unsafe impl Send for Listed {}
// SAFETY: as above: the pointee is immutable from this library's side.
unsafe impl Sync for Listed {}

/// The devices of this process: one, or none when `RDMA_STACK_DEVICE` does not parse
/// (the reason, printed once, is kept).
static DEVICES: OnceLock<Result<Listed, String>> = OnceLock::new();

/// Copies `s` into a C string field (truncated, NUL-terminated).
fn c_str_field<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

fn devices() -> &'static Result<Listed, String> {
    DEVICES.get_or_init(|| {
        let var = std::env::var(DEVICE_ENV).ok();
        let spec = Spec::parse(var.as_deref()).inspect_err(|e| eprintln!("libibverbs: {e}"))?;
        let dev = Box::new(ibv_device {
            _ops: _ibv_device_ops {
                _dummy1: None,
                _dummy2: None,
            },
            node_type: IBV_NODE_CA,
            transport_type: IBV_TRANSPORT_IB,
            name: c_str_field("mlx5_0"),
            dev_name: c_str_field("uverbs0"),
            dev_path: c_str_field("/sys/class/infiniband_verbs/uverbs0"),
            ibdev_path: c_str_field("/sys/class/infiniband/mlx5_0"),
        });
        Ok(Listed {
            dev: Box::into_raw(dev),
            spec,
        })
    })
}

/// `struct ibv_device **ibv_get_device_list(int *num_devices)`: a NULL-terminated array
/// (free it with `ibv_free_device_list`); `num_devices` (if not NULL) gets the count.
///
/// # Safety
///
/// `num_devices` is NULL or points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let listed: Vec<*mut ibv_device> = match devices() {
        Ok(l) => vec![l.dev],
        Err(_) => Vec::new(),
    };
    // SAFETY: calloc of (n + 1) pointers; checked for NULL below.
    let arr = unsafe { libc::calloc(listed.len() + 1, size_of::<*mut ibv_device>()) }
        as *mut *mut ibv_device;
    if arr.is_null() {
        set_errno(ENOMEM);
        return null_mut();
    }
    for (i, d) in listed.iter().enumerate() {
        // SAFETY: `arr` has listed.len() + 1 slots; i < listed.len().
        unsafe { *arr.add(i) = *d };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int or NULL (checked).
        unsafe { *num_devices = listed.len() as c_int };
    }
    arr
}
versioned!("IBVERBS_1.1", ibv_get_device_list);

/// `void ibv_free_device_list(struct ibv_device **list)`.
///
/// # Safety
///
/// `list` is NULL or came from `ibv_get_device_list` and is freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array was allocated with calloc by ibv_get_device_list (free(NULL) is fine).
    unsafe { libc::free(list.cast()) };
}
versioned!("IBVERBS_1.1", ibv_free_device_list);

/// `const char *ibv_get_device_name(struct ibv_device *device)`.
///
/// # Safety
///
/// `device` is NULL or an entry of a device list.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    if device.is_null() {
        set_errno(EINVAL);
        return ptr::null();
    }
    // SAFETY: `device` is a live ibv_device (list entries are never freed).
    unsafe { (*device).name.as_ptr() }
}
versioned!("IBVERBS_1.1", ibv_get_device_name);

// ---------------------------------------------------------------------------------------------
// Contexts.

/// An open device: the extended context C sees (through `v.context`) and the device behind it.
#[repr(C)]
struct Context {
    /// Must stay first: `ibv_context *` minus the embedded context's offset is this struct.
    v: verbs_context,
    backend: Arc<dyn Backend>,
}

/// Offset of the `ibv_context` C sees within [`Context`].
const CTX_OFFSET: usize = offset_of!(Context, v) + offset_of!(verbs_context, context);

/// The [`Context`] of `ctx`, or `None` for NULL.
///
/// # Safety
///
/// `ctx` is NULL or a context from `ibv_open_device` that is not closed.
unsafe fn context<'a>(ctx: *mut ibv_context) -> Option<&'a Context> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: every ibv_context this library hands out is embedded in a Context at
    // CTX_OFFSET (the caller's promise), so stepping back lands on that Context.
    Some(unsafe { &*ctx.cast::<u8>().sub(CTX_OFFSET).cast::<Context>() })
}

/// The ops table every context starts with: the data-path slots the header's inline
/// `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq` call; SRQs are not
/// implemented (ENOSYS); the compatibility slots stay empty.
fn ops_table() -> ibv_context_ops {
    /// `ibv_poll_cq`: the number of completions written, or a negative errno.
    unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        // SAFETY: the caller's CQ and array (the inline's contract).
        with_stack(-ENODEV, |s| unsafe { s.poll_cq(cq, n, wc) })
    }
    /// `ibv_req_notify_cq`.
    unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited: c_int) -> c_int {
        // SAFETY: the caller's CQ.
        with_stack(ENODEV, |s| unsafe { s.req_notify_cq(cq, solicited) })
    }
    /// `ibv_post_srq_recv` not implemented yet: nothing posted.
    unsafe extern "C" fn post_srq_recv(
        _: *mut ibv_srq,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        if !bad.is_null() {
            // SAFETY: the inline passes its own `bad_wr` out-pointer.
            unsafe { *bad = wr };
        }
        ENOSYS
    }
    /// `ibv_post_send`: 0, or an errno with `*bad` the first request not posted.
    unsafe extern "C" fn post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
    ) -> c_int {
        // SAFETY: the caller's QP and list.
        with_stack(ENODEV, |s| unsafe { s.post_send(qp, wr, bad) })
    }
    /// `ibv_post_recv`: 0, or an errno with `*bad` the first request not posted.
    unsafe extern "C" fn post_recv(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        // SAFETY: the caller's QP and list.
        with_stack(ENODEV, |s| unsafe { s.post_recv(qp, wr, bad) })
    }
    ibv_context_ops {
        _compat_query_device: None,
        _compat_query_port: None,
        _compat_alloc_pd: None,
        _compat_dealloc_pd: None,
        _compat_reg_mr: None,
        _compat_rereg_mr: None,
        _compat_dereg_mr: None,
        alloc_mw: None,
        bind_mw: None,
        dealloc_mw: None,
        _compat_create_cq: None,
        poll_cq: Some(poll_cq),
        req_notify_cq: Some(req_notify_cq),
        _compat_cq_event: None,
        _compat_resize_cq: None,
        _compat_destroy_cq: None,
        _compat_create_srq: None,
        _compat_modify_srq: None,
        _compat_query_srq: None,
        _compat_destroy_srq: None,
        post_srq_recv: Some(post_srq_recv),
        _compat_create_qp: None,
        _compat_query_qp: None,
        _compat_modify_qp: None,
        _compat_destroy_qp: None,
        post_send: Some(post_send),
        post_recv: Some(post_recv),
        _compat_create_ah: None,
        _compat_destroy_ah: None,
        _compat_attach_mcast: None,
        _compat_detach_mcast: None,
        _compat_async_event: None,
    }
}

/// `struct ibv_context *ibv_open_device(struct ibv_device *device)`: NULL with errno on
/// failure (ENODEV for a device not in the list or one that did not open; the reason is
/// printed on stderr).
///
/// # Safety
///
/// `device` is NULL or an entry of a device list.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let listed = match devices() {
        Ok(l) if !device.is_null() && ptr::eq(l.dev, device) => l,
        _ => {
            set_errno(ENODEV);
            return null_mut();
        }
    };
    let backend = match backend::acquire(&listed.spec) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("libibverbs: cannot open mlx5_0: {e}");
            set_errno(ENODEV);
            return null_mut();
        }
    };
    let ctx = Box::new(Context {
        v: verbs_context {
            query_port: Some(ext_query_port),
            advise_mr: None,
            alloc_null_mr: None,
            read_counters: None,
            attach_counters_point_flow: None,
            create_counters: None,
            destroy_counters: None,
            reg_dm_mr: None,
            alloc_dm: None,
            free_dm: None,
            modify_flow_action_esp: None,
            destroy_flow_action: None,
            create_flow_action_esp: None,
            modify_qp_rate_limit: None,
            alloc_parent_domain: None,
            dealloc_td: None,
            alloc_td: None,
            modify_cq: None,
            post_srq_ops: None,
            destroy_rwq_ind_table: None,
            create_rwq_ind_table: None,
            destroy_wq: None,
            modify_wq: None,
            create_wq: None,
            query_rt_values: None,
            create_cq_ex: None,
            priv_: null_mut(),
            query_device_ex: None,
            ibv_destroy_flow: None,
            ABI_placeholder2: None,
            ibv_create_flow: None,
            ABI_placeholder1: None,
            open_qp: None,
            create_qp_ex: None,
            get_srq_num: None,
            create_srq_ex: None,
            open_xrcd: None,
            close_xrcd: None,
            _ABI_placeholder3: 0,
            sz: size_of::<verbs_context>(),
            context: ibv_context {
                device,
                ops: ops_table(),
                cmd_fd: -1,
                async_fd: -1,
                num_comp_vectors: 1,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                abi_compat: VERBS_ABI_IS_EXTENDED,
            },
        },
        backend,
    });
    let base = Box::into_raw(ctx);
    // SAFETY: `base` is a live Context; the embedded ibv_context is at CTX_OFFSET.
    unsafe { base.cast::<u8>().add(CTX_OFFSET).cast::<ibv_context>() }
}
versioned!("IBVERBS_1.1", ibv_open_device);

/// `int ibv_close_device(struct ibv_context *context)`: 0, or -1 with errno. The device
/// stays open (the process's stack lives until it exits).
///
/// # Safety
///
/// `context` is NULL or an open context, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    if context.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: an open context is the ibv_context inside a boxed Context at CTX_OFFSET.
    drop(unsafe { Box::from_raw(context.cast::<u8>().sub(CTX_OFFSET).cast::<Context>()) });
    0
}
versioned!("IBVERBS_1.1", ibv_close_device);

// ---------------------------------------------------------------------------------------------
// Queries.

/// An errno for a value that must be positive.
fn errno_of(e: verbs::Error) -> c_int {
    e.errno()
}

fn clamp_int(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// The EUI-64 of a MAC (the node GUID's bytes, network order).
fn guid_of(mac: [u8; 6]) -> u64 {
    u64::from_ne_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

fn device_attr(b: &dyn Backend) -> Result<ibv_device_attr, verbs::Error> {
    let a = b.query_device()?;
    let pkeys = b.query_port(1).map(|p| p.pkey_tbl_len).unwrap_or(1);
    let guid = guid_of(b.mac());
    let mut fw_ver = [0 as c_char; 64];
    for (o, b) in fw_ver.iter_mut().zip(a.fw_ver.to_c_bytes()) {
        *o = b as c_char;
    }
    Ok(ibv_device_attr {
        fw_ver,
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: !0xfff,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: 0,
        max_qp: clamp_int(a.max_qp),
        max_qp_wr: clamp_int(a.max_qp_wr),
        device_cap_flags: 0,
        max_sge: clamp_int(a.max_sge),
        max_sge_rd: clamp_int(a.max_sge_rd),
        max_cq: clamp_int(a.max_cq),
        max_cqe: clamp_int(a.max_cqe),
        max_mr: clamp_int(a.max_mr),
        max_pd: clamp_int(a.max_pd),
        max_qp_rd_atom: clamp_int(a.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: clamp_int(a.max_qp_rd_atom.saturating_mul(a.max_qp)),
        max_qp_init_rd_atom: clamp_int(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: a.atomic_cap as ibv_atomic_cap,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: c_int::MAX,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: clamp_int(a.max_srq),
        max_srq_wr: clamp_int(a.max_srq_wr),
        max_srq_sge: clamp_int(a.max_srq_sge),
        max_pkeys: pkeys,
        local_ca_ack_delay: 16,
        phys_port_cnt: a.phys_port_cnt,
    })
}

/// `int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)`: 0 or
/// an errno.
///
/// # Safety
///
/// `context` is an open context (or NULL); `device_attr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        return EINVAL;
    };
    if device_attr.is_null() {
        return EINVAL;
    }
    match device_attr_of(c) {
        Ok(a) => {
            // SAFETY: checked non-NULL; the caller's struct is writable.
            unsafe { device_attr.write(a) };
            0
        }
        Err(e) => errno_of(e),
    }
}
versioned!("IBVERBS_1.1", ibv_query_device);

fn device_attr_of(c: &Context) -> Result<ibv_device_attr, verbs::Error> {
    device_attr(&*c.backend)
}

fn port_attr(b: &dyn Backend, port: u8) -> Result<ibv_port_attr, verbs::Error> {
    let p = b.query_port(port)?;
    let active = p.state == verbs::PortState::Active;
    Ok(ibv_port_attr {
        state: p.state as ibv_port_state,
        max_mtu: p.max_mtu as ibv_mtu,
        active_mtu: p.active_mtu as ibv_mtu,
        gid_tbl_len: clamp_int(p.gid_tbl_len),
        port_cap_flags: 0,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X at 25 Gb/s per lane (EDR signalling), as a 100G ConnectX port reports.
        active_width: 2,
        active_speed: 32,
        // 5: LinkUp; 3: Disabled.
        phys_state: if active { 5 } else { 3 },
        link_layer: p.link_layer as u8,
        flags: 0,
        port_cap_flags2: 0,
    })
}

/// Writes the first `len` bytes (at most the whole struct) of `port`'s attributes to `out`.
///
/// # Safety
///
/// `ctx` is an open context or NULL; `out` is NULL or has `len` writable bytes.
unsafe fn query_port_into(ctx: *mut ibv_context, port: u8, out: *mut u8, len: usize) -> c_int {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { context(ctx) }) else {
        return EINVAL;
    };
    if out.is_null() {
        return EINVAL;
    }
    match port_attr(&*c.backend, port) {
        Ok(a) => {
            let n = len.min(size_of::<ibv_port_attr>());
            // SAFETY: `a` is a plain struct of n >= bytes; `out` has `len` >= n writable bytes.
            unsafe { ptr::copy_nonoverlapping((&raw const a).cast::<u8>(), out, n) };
            0
        }
        Err(e) => errno_of(e),
    }
}

/// The extended `query_port` slot (`verbs_context::query_port`) the header's `ibv_query_port`
/// inline calls with `sizeof(struct ibv_port_attr)`.
unsafe extern "C" fn ext_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    // SAFETY: the inline passes its context and a struct of `port_attr_len` bytes.
    unsafe { query_port_into(context, port_num, port_attr.cast(), port_attr_len) }
}

/// `int ibv_query_port(struct ibv_context *, uint8_t port_num, struct _compat_ibv_port_attr
/// *)`: the symbol behind the header's wrapper for contexts without the extended slot; fills
/// the legacy 48-byte prefix of `ibv_port_attr`. 0 or an errno.
///
/// # Safety
///
/// `context` is an open context or NULL; `port_attr` is NULL or has 48 writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        query_port_into(
            context,
            port_num,
            port_attr.cast(),
            IBV_PORT_ATTR_LEGACY_LEN,
        )
    }
}
versioned!("IBVERBS_1.1", ibv_query_port);

/// `int ibv_query_gid(struct ibv_context *, uint8_t port_num, int index, union ibv_gid *)`:
/// 0, or -1 with errno.
///
/// # Safety
///
/// `context` is an open context or NULL; `gid` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        set_errno(EINVAL);
        return -1;
    };
    let Ok(index) = u16::try_from(index) else {
        set_errno(EINVAL);
        return -1;
    };
    if gid.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    match c.backend.query_gid(port_num, index) {
        Ok(g) => {
            // SAFETY: checked non-NULL; the caller's union is writable.
            unsafe { gid.write(ibv_gid { raw: g.0 }) };
            0
        }
        Err(e) => {
            set_errno(errno_of(e));
            -1
        }
    }
}
versioned!("IBVERBS_1.1", ibv_query_gid);

/// `int _ibv_query_gid_ex(struct ibv_context *, uint32_t port_num, uint32_t gid_index,
/// struct ibv_gid_entry *, uint32_t flags, size_t entry_size)`: the GID with its type
/// (RoCE v2). 0 or an errno.
///
/// # Safety
///
/// `context` is an open context or NULL; `entry` is NULL or has `entry_size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        return EINVAL;
    };
    if entry.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
        return EINVAL;
    }
    let (Ok(port), Ok(index)) = (u8::try_from(port_num), u16::try_from(gid_index)) else {
        return EINVAL;
    };
    match c.backend.query_gid(port, index) {
        Ok(g) if !g.is_zero() => {
            // SAFETY: checked non-NULL and large enough.
            unsafe {
                entry.write(ibv_gid_entry {
                    gid: ibv_gid { raw: g.0 },
                    gid_index,
                    port_num,
                    gid_type: IBV_GID_TYPE_ROCE_V2,
                    ndev_ifindex: 0,
                })
            };
            0
        }
        // An empty slot: rdma-core answers ENODATA.
        Ok(_) => libc::ENODATA,
        Err(e) => errno_of(e),
    }
}
versioned!("IBVERBS_1.11", _ibv_query_gid_ex);

/// `int ibv_query_pkey(struct ibv_context *, uint8_t port_num, int index, __be16 *pkey)`:
/// the default P_Key at index 0; 0, or -1 with errno.
///
/// # Safety
///
/// `context` is an open context or NULL; `pkey` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        set_errno(EINVAL);
        return -1;
    };
    let len = match c.backend.query_port(port_num) {
        Ok(p) => p.pkey_tbl_len,
        Err(e) => {
            set_errno(errno_of(e));
            return -1;
        }
    };
    if pkey.is_null() || index < 0 || index >= c_int::from(len) {
        set_errno(EINVAL);
        return -1;
    }
    let v: u16 = if index == 0 { 0xffff } else { 0 };
    // SAFETY: checked non-NULL; the caller's u16 is writable.
    unsafe { pkey.write(v.to_be()) };
    0
}
versioned!("IBVERBS_1.1", ibv_query_pkey);

// ---------------------------------------------------------------------------------------------
// Verbs objects: each call goes to the process's stack (see [`stack`]).

/// The process's stack (opened on first use; `None` when no device opens).
fn stack() -> Option<&'static dyn Backend> {
    let l = devices().as_ref().ok()?;
    backend::acquire_ref(&l.spec).map(|a| &**a)
}

/// Runs `f` on the stack; `none` when no device could be opened (errno ENODEV).
fn with_stack<R>(none: R, f: impl FnOnce(&'static dyn Backend) -> R) -> R {
    match stack() {
        Some(s) => f(s),
        None => {
            set_errno(ENODEV);
            none
        }
    }
}

/// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`: NULL with errno on failure.
///
/// # Safety
///
/// `context` is an open context or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        set_errno(EINVAL);
        return null_mut();
    };
    // SAFETY: an open context.
    unsafe { c.backend.alloc_pd(context) }
}
versioned!("IBVERBS_1.1", ibv_alloc_pd);

/// `int ibv_dealloc_pd(struct ibv_pd *)`: 0 or an errno (EBUSY while objects use it; the PD
/// stays valid then).
///
/// # Safety
///
/// `pd` is NULL or a PD from `ibv_alloc_pd` not yet deallocated, not used by another thread
/// during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: the caller's PD.
    with_stack(ENODEV, |s| unsafe { s.dealloc_pd(pd) })
}
versioned!("IBVERBS_1.1", ibv_dealloc_pd);

/// `struct ibv_mr *ibv_reg_mr(struct ibv_pd *, void *addr, size_t length, int access)`:
/// registers the program's own memory; NULL with errno on failure.
///
/// # Safety
///
/// libibverbs' contract: `addr..addr + length` is memory of this process that stays
/// allocated until `ibv_dereg_mr` of the region returned 0 (the device may read and write
/// it, as the access flags allow, at any time meanwhile).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract, passed on.
    with_stack(null_mut(), |s| unsafe {
        s.reg_mr(pd, addr, length, access)
    })
}
versioned!("IBVERBS_1.1", ibv_reg_mr);

/// `struct ibv_mr *ibv_reg_mr_iova2(pd, addr, length, iova, access)`: as `ibv_reg_mr` when
/// `iova` equals `addr`; another IOVA is EOPNOTSUPP.
///
/// # Safety
///
/// As `ibv_reg_mr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    if iova != addr as u64 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { ibv_reg_mr(pd, addr, length, access as c_int) }
}
versioned!("IBVERBS_1.8", ibv_reg_mr_iova2);

/// `int ibv_dereg_mr(struct ibv_mr *)`: 0 or an errno (the region stays valid then).
///
/// # Safety
///
/// `mr` is NULL or a live region of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: the caller's region.
    with_stack(ENODEV, |s| unsafe { s.dereg_mr(mr) })
}
versioned!("IBVERBS_1.1", ibv_dereg_mr);

/// `struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *)`: its `fd` is an
/// eventfd, readable while completion events wait to be read with `ibv_get_cq_event`.
///
/// # Safety
///
/// `context` is an open context or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        set_errno(EINVAL);
        return null_mut();
    };
    // SAFETY: an open context.
    unsafe { c.backend.create_comp_channel(context) }
}
versioned!("IBVERBS_1.0", ibv_create_comp_channel);

/// `int ibv_destroy_comp_channel(struct ibv_comp_channel *)`: 0 or an errno (EBUSY while CQs
/// use it).
///
/// # Safety
///
/// `channel` is NULL or a live channel of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: the caller's channel.
    with_stack(ENODEV, |s| unsafe { s.destroy_comp_channel(channel) })
}
versioned!("IBVERBS_1.0", ibv_destroy_comp_channel);

/// `struct ibv_cq *ibv_create_cq(context, cqe, cq_context, channel, comp_vector)`.
///
/// # Safety
///
/// `context` is an open context; `channel` NULL or a live channel of it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: the caller passes an open context or NULL.
    let Some(c) = (unsafe { self::context(context) }) else {
        set_errno(EINVAL);
        return null_mut();
    };
    // SAFETY: an open context; the caller's channel.
    unsafe { c.backend.create_cq(context, cqe, cq_context, channel) }
}
versioned!("IBVERBS_1.1", ibv_create_cq);

/// `int ibv_destroy_cq(struct ibv_cq *)`: 0 or an errno (EBUSY while a QP uses it). As in
/// libibverbs, it returns once every completion event `ibv_get_cq_event` reported for the CQ
/// has been acknowledged (`ibv_ack_cq_events`), and the CQ's events still queued on its
/// channel are never reported. (No asynchronous events are reported: the context's
/// `async_fd` is -1 and `ibv_get_async_event` is not exported, so there are none to wait
/// for.)
///
/// # Safety
///
/// `cq` is NULL or a live CQ of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: the caller's CQ.
    with_stack(ENODEV, |s| unsafe { s.destroy_cq(cq) })
}
versioned!("IBVERBS_1.1", ibv_destroy_cq);

/// `int ibv_get_cq_event(channel, &cq, &cq_context)`: waits for the next completion event of
/// the channel (0), -1 with errno on failure.
///
/// # Safety
///
/// `channel` is a live channel; `cq` and `cq_context` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's channel and out-pointers.
    with_stack(-1, |s| unsafe { s.get_cq_event(channel, cq, cq_context) })
}
versioned!("IBVERBS_1.1", ibv_get_cq_event);

/// `void ibv_ack_cq_events(struct ibv_cq *, unsigned int nevents)`: acknowledges `nevents`
/// completion events `ibv_get_cq_event` reported for `cq` (`ibv_destroy_cq` waits until all
/// are).
///
/// # Safety
///
/// `cq` is NULL or a live CQ of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: the caller's CQ.
    with_stack((), |s| unsafe { s.ack_cq_events(cq, nevents) })
}
versioned!("IBVERBS_1.1", ibv_ack_cq_events);

/// `int ibv_query_qp(qp, attr, attr_mask, init_attr)`: the state, the Q_Key of a UD QP,
/// the port, and the creation attributes.
///
/// # Safety
///
/// `qp` a live QP; `attr` writable; `init_attr` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's QP and out-parameters.
    with_stack(ENODEV, |s| unsafe {
        s.query_qp(qp, attr, attr_mask, init_attr)
    })
}
versioned!("IBVERBS_1.1", ibv_query_qp);

/// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)`: an RC or UD
/// QP in RESET on the program's CQs (no SRQ); the actual sizes are written back into
/// `attr->cap`. NULL with errno on failure.
///
/// # Safety
///
/// `pd` a live PD; `attr` valid, its CQs live CQs of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller's PD and attributes.
    with_stack(null_mut(), |s| unsafe { s.create_qp_verbs(pd, attr) })
}
versioned!("IBVERBS_1.1", ibv_create_qp);

/// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)`: 0 or an
/// errno. The address vector's MAC comes from the destination GID's IPv4 address (the
/// neighbour table, else the port's resolver).
///
/// # Safety
///
/// `qp` a live QP; `attr` valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    // SAFETY: the caller's QP and attributes.
    with_stack(ENODEV, |s| unsafe { s.modify_qp(qp, attr, attr_mask) })
}
versioned!("IBVERBS_1.1", ibv_modify_qp);

/// `int ibv_destroy_qp(struct ibv_qp *)`: 0 or an errno. (libibverbs' waits for the QP's
/// unacknowledged asynchronous events; none are reported here, see `ibv_destroy_cq`.)
///
/// # Safety
///
/// `qp` NULL or a live QP of this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: the caller's QP.
    with_stack(ENODEV, |s| unsafe { s.destroy_qp_verbs(qp) })
}
versioned!("IBVERBS_1.1", ibv_destroy_qp);

/// `struct ibv_ah *ibv_create_ah(struct ibv_pd *, struct ibv_ah_attr *)`: an address handle
/// to the IPv4-mapped GID in `attr` (EHOSTUNREACH when its MAC is not known).
///
/// # Safety
///
/// `pd` a live PD; `attr` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: the caller's PD and attributes.
    with_stack(null_mut(), |s| unsafe { s.create_ah(pd, attr) })
}
versioned!("IBVERBS_1.1", ibv_create_ah);

/// `int ibv_destroy_ah(struct ibv_ah *)`.
///
/// # Safety
///
/// `ah` NULL or a live AH of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: the caller's AH.
    with_stack(ENODEV, |s| unsafe { s.destroy_ah(ah) })
}
versioned!("IBVERBS_1.1", ibv_destroy_ah);

/// `int ibv_init_ah_from_wc(context, port_num, wc, grh, ah_attr)`: the address of a reply to
/// the sender of a UD receive (its 40-byte GRH area at `grh`).
///
/// # Safety
///
/// `wc` and `grh` readable (40 bytes at `grh`), `ah_attr` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    _context: *mut ibv_context,
    _port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: the caller's completion, GRH area and out-parameter.
    with_stack(ENODEV, |s| unsafe { s.init_ah_from_wc(wc, grh, ah_attr) })
}
versioned!("IBVERBS_1.1", ibv_init_ah_from_wc);

/// `struct ibv_ah *ibv_create_ah_from_wc(pd, wc, grh, port_num)`.
///
/// # Safety
///
/// As `ibv_init_ah_from_wc` and `ibv_create_ah`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    // SAFETY: zeroed attributes are valid; filled by the call.
    let mut a: ibv_ah_attr = unsafe { core::mem::zeroed() };
    // SAFETY: the caller's completion and GRH area; our local.
    let r = unsafe { ibv_init_ah_from_wc(null_mut(), port_num, wc, grh, &mut a) };
    if r != 0 {
        set_errno(r);
        return null_mut();
    }
    // SAFETY: the caller's PD; our attributes.
    unsafe { ibv_create_ah(pd, &mut a) }
}
versioned!("IBVERBS_1.1", ibv_create_ah_from_wc);

// ---------------------------------------------------------------------------------------------
// Not implemented yet: exported so that programs load (they bind every import at start-up),
// failing the way each call reports errors.

/// Exports functions that return NULL with errno ENOSYS.
macro_rules! enosys_ptr {
    ($ver:literal: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (NULL, errno ENOSYS).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(ENOSYS);
            null_mut()
        }
        versioned!($ver, $name);
    )*};
}

/// Exports functions that return the errno ENOSYS (and set errno too).
macro_rules! enosys_int {
    ($ver:literal: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (returns ENOSYS).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> c_int {
            set_errno(ENOSYS);
            ENOSYS
        }
        versioned!($ver, $name);
    )*};
}

enosys_ptr!("IBVERBS_1.1": ibv_create_srq);
enosys_int!("IBVERBS_1.1": ibv_attach_mcast, ibv_detach_mcast, ibv_destroy_srq);
enosys_ptr!("IBVERBS_1.6": ibv_qp_to_qp_ex);

// ---------------------------------------------------------------------------------------------
// What rdma-core's own provider libraries (ibverbs-providers' libmlx5.so.1, libefa.so.1)
// import from libibverbs. perftest links them, and they bind every import at load time: their
// constructors register the driver (a no-op here); nothing here ever calls into them, so the
// rest is never reached and only has to exist.

/// `verbs_allow_disassociate_destroy`: a flag the providers read (a 1-byte data object).
#[unsafe(no_mangle)]
pub static verbs_allow_disassociate_destroy: core::sync::atomic::AtomicU8 =
    core::sync::atomic::AtomicU8::new(0);
versioned!("IBVERBS_PRIVATE_34", verbs_allow_disassociate_destroy);

/// `void verbs_register_driver_34(const struct verbs_device_ops *)`: a provider's constructor
/// registering itself; ignored (this library serves its own devices).
#[unsafe(no_mangle)]
pub extern "C" fn verbs_register_driver_34() {}
versioned!("IBVERBS_PRIVATE_34", verbs_register_driver_34);

enosys_int!("IBVERBS_PRIVATE_34":
    __verbs_log, _verbs_init_and_alloc_context, execute_ioctl, ibv_query_gid_type,
    verbs_init_cq, verbs_open_device, verbs_set_ops, verbs_uninit_context,
    ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters,
    ibv_cmd_create_cq_ex, ibv_cmd_create_flow, ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp_ex, ibv_cmd_create_qp_ex2, ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq, ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq, ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd,
    ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr, ibv_cmd_query_port,
    ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters, ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_rereg_mr, ibv_cmd_resize_cq,
);
enosys_int!("IBVERBS_1.1": ibv_dofork_range, ibv_dontfork_range, ibv_resolve_eth_l2_from_gid);

// ---------------------------------------------------------------------------------------------
// The connection manager, for librdmacm.so.1: it finds these entry points with dlsym (node
// RDMA_STACK_PRIVATE_1), so both libraries share this library's one stack.

/// The stack with the connection manager's context opened (`id->verbs`, and the PD ids
/// without one use).
fn cm_stack() -> Option<&'static dyn Backend> {
    let s = stack()?;
    let ctx = s.cm_context(&mut || {
        let Ok(l) = devices() else {
            return null_mut();
        };
        // SAFETY: the listed device.
        unsafe { ibv_open_device(l.dev) }
    });
    if ctx.is_null() {
        return None;
    }
    Some(s)
}

/// Runs `f` on the connection manager's stack; -1 with ENODEV when there is none.
fn with_cm<R>(none: R, f: impl FnOnce(&'static dyn Backend) -> R) -> R {
    match cm_stack() {
        Some(s) => f(s),
        None => {
            set_errno(ENODEV);
            none
        }
    }
}

/// Exports `rdma_stack_$name`, librdmacm's `$name`, forwarding to the stack's method.
macro_rules! cm_entry {
    ($name:ident => $method:ident($($a:ident: $t:ty),*) -> $r:ty, $none:expr) => {
        #[doc = concat!("librdmacm's `", stringify!($method), "` (reached through `librdmacm.so.1`).")]
        ///
        /// # Safety
        ///
        /// As the librdmacm call: objects of this library, valid pointers.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            // SAFETY: the caller's objects and pointers, passed on.
            with_cm($none, |s| unsafe { s.$method($($a),*) })
        }
        versioned!("RDMA_STACK_PRIVATE_1", $name);
    };
}

use capi_abi::rdmacm::{
    rdma_addrinfo, rdma_cm_event, rdma_cm_id, rdma_conn_param, rdma_event_channel,
};

cm_entry!(rdma_stack_create_event_channel => create_event_channel() -> *mut rdma_event_channel, null_mut());
/// librdmacm's `rdma_destroy_event_channel`.
///
/// # Safety
///
/// `ch` NULL or a channel of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_stack_destroy_event_channel(ch: *mut rdma_event_channel) {
    // SAFETY: the caller's channel.
    with_cm((), |s| unsafe { s.destroy_event_channel(ch) })
}
versioned!("RDMA_STACK_PRIVATE_1", rdma_stack_destroy_event_channel);
cm_entry!(rdma_stack_create_id => create_id(ch: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: c_int) -> c_int, -1);
cm_entry!(rdma_stack_destroy_id => destroy_id(id: *mut rdma_cm_id) -> c_int, -1);
cm_entry!(rdma_stack_bind_addr => bind_addr(id: *mut rdma_cm_id, addr: *const libc::sockaddr) -> c_int, -1);
cm_entry!(rdma_stack_resolve_addr => resolve_addr(id: *mut rdma_cm_id, src: *const libc::sockaddr, dst: *const libc::sockaddr, timeout_ms: c_int) -> c_int, -1);
cm_entry!(rdma_stack_resolve_route => resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int, -1);
cm_entry!(rdma_stack_listen => listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int, -1);
cm_entry!(rdma_stack_connect => connect(id: *mut rdma_cm_id, p: *const rdma_conn_param) -> c_int, -1);
cm_entry!(rdma_stack_accept => accept(id: *mut rdma_cm_id, p: *const rdma_conn_param) -> c_int, -1);
cm_entry!(rdma_stack_reject => reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int, -1);
cm_entry!(rdma_stack_disconnect => disconnect(id: *mut rdma_cm_id) -> c_int, -1);
cm_entry!(rdma_stack_get_cm_event => get_cm_event(ch: *mut rdma_event_channel, ev: *mut *mut rdma_cm_event) -> c_int, -1);
cm_entry!(rdma_stack_ack_cm_event => ack_cm_event(ev: *mut rdma_cm_event) -> c_int, -1);
cm_entry!(rdma_stack_create_qp => create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int, -1);
cm_entry!(rdma_stack_create_ep => create_ep(id: *mut *mut rdma_cm_id, res: *const rdma_addrinfo, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int, -1);
cm_entry!(rdma_stack_get_request => get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int, -1);
cm_entry!(rdma_stack_set_option => set_option(id: *mut rdma_cm_id, level: c_int, name: c_int, val: *const c_void, len: usize) -> c_int, -1);
cm_entry!(rdma_stack_init_qp_attr => init_qp_attr(id: *mut rdma_cm_id, attr: *mut ibv_qp_attr, mask: *mut c_int) -> c_int, -1);
cm_entry!(rdma_stack_establish => establish(id: *mut rdma_cm_id) -> c_int, -1);
cm_entry!(rdma_stack_migrate_id => migrate_id(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int, -1);
/// librdmacm's `rdma_destroy_qp`.
///
/// # Safety
///
/// `id` an id of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_stack_destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: the caller's id.
    with_cm((), |s| unsafe { s.destroy_qp(id) })
}
versioned!("RDMA_STACK_PRIVATE_1", rdma_stack_destroy_qp);
/// librdmacm's `rdma_destroy_ep`.
///
/// # Safety
///
/// `id` an id of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_stack_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: the caller's id.
    with_cm((), |s| unsafe { s.destroy_ep(id) })
}
versioned!("RDMA_STACK_PRIVATE_1", rdma_stack_destroy_ep);
