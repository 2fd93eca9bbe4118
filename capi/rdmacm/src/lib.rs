//! `librdmacm.so.1` for C programs compiled against rdma-core 44 (Debian 12): the same
//! SONAME, symbol versions (`RDMACM_1.0` .. `RDMACM_1.3`) and object layouts
//! ([`capi_abi::rdmacm`]).
//!
//! Stateless: `rdma_getaddrinfo` / `rdma_freeaddrinfo` (IPv4, through the system resolver),
//! `rdma_event_str` and `rpoll` (a `poll` pass-through) are answered here; every other
//! connection-manager call forwards to `libibverbs.so.1`'s `rdma_stack_*` entry point (found
//! with `dlopen` + `dlsym`), where the process's one stack lives, so ids carry that library's
//! verbs objects. Multicast and `rdma_create_qp_ex` answer -1 with errno ENOSYS.
//!
//! Each export is bound to its version node by an assembler `.symver` placed right after the
//! function ([`versioned!`]); `rdmacm.map` only declares the nodes.

use core::ffi::{c_char, c_int, c_void};
use core::mem::size_of;
use core::ptr::{self, null_mut};

use capi_abi::ibv::{IBV_QPT_RC, IBV_QPT_UD};
use capi_abi::rdmacm::*;
use libc::{EINVAL, ENOSYS};

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
fn set_errno(e: c_int) {
    // SAFETY: glibc's per-thread errno location is always valid for the calling thread.
    unsafe { *libc::__errno_location() = e };
}

// ---------------------------------------------------------------------------------------------
// Address resolution.

/// `malloc`s a copy of the `len` bytes at `src`; NULL when out of memory.
///
/// # Safety
///
/// `src` has `len` readable bytes.
unsafe fn dup(src: *const c_void, len: usize) -> *mut c_void {
    // SAFETY: plain allocation; checked below.
    let p = unsafe { libc::malloc(len) };
    if !p.is_null() {
        // SAFETY: `src` has `len` readable bytes, `p` `len` writable ones; distinct blocks.
        unsafe { ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len) };
    }
    p
}

/// `int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo
/// *hints, struct rdma_addrinfo **res)`: 0, an `EAI_*` code from the resolver, or -1 with
/// errno.
///
/// Resolves through the system's `getaddrinfo`, IPv4 only (this stack's connection manager
/// speaks IPv4; an unspecified family means `AF_INET`), and answers with the first match:
/// with `RAI_PASSIVE` the address is the source (`ai_src_addr`), otherwise the destination
/// (`ai_dst_addr`, with a copy of the hints' source address if they give one). The QP type
/// follows the port space (RC for TCP and IB, UD for UDP) unless the hints name one; there
/// is no route or connect data for IP addresses.
///
/// # Safety
///
/// `node` and `service` are NULL or C strings; `hints` is NULL or a valid `rdma_addrinfo`
/// (its `ai_src_addr` NULL or `ai_src_len` readable bytes); `res` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: NULL or a valid rdma_addrinfo (the caller's promise).
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    let family = match h.map_or(0, |h| h.ai_family) {
        0 | libc::AF_INET => libc::AF_INET,
        _ => return libc::EAI_FAMILY,
    };
    let ps = match h.map_or(0, |h| h.ai_port_space) {
        0 => match h.map_or(0, |h| h.ai_qp_type) as u32 {
            IBV_QPT_UD => RDMA_PS_UDP,
            _ => RDMA_PS_TCP,
        },
        ps @ (RDMA_PS_TCP | RDMA_PS_UDP | RDMA_PS_IB | RDMA_PS_IPOIB) => ps,
        _ => {
            set_errno(EINVAL);
            return -1;
        }
    };
    let qp_type = match h.map_or(0, |h| h.ai_qp_type) {
        0 if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB => IBV_QPT_UD as c_int,
        0 => IBV_QPT_RC as c_int,
        t => t,
    };
    let (socktype, protocol) = if qp_type == IBV_QPT_UD as c_int {
        (libc::SOCK_DGRAM, libc::IPPROTO_UDP)
    } else {
        (libc::SOCK_STREAM, libc::IPPROTO_TCP)
    };

    // SAFETY: an all-zero addrinfo is a valid "no hints" value.
    let mut ai_hints: libc::addrinfo = unsafe { core::mem::zeroed() };
    ai_hints.ai_family = family;
    ai_hints.ai_socktype = socktype;
    ai_hints.ai_protocol = protocol;
    if flags & RAI_PASSIVE != 0 {
        ai_hints.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ai_hints.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut found: *mut libc::addrinfo = null_mut();
    // SAFETY: node/service are NULL or C strings (the caller's promise); the hints and the
    // out-pointer are ours.
    let r = unsafe { libc::getaddrinfo(node, service, &ai_hints, &mut found) };
    if r != 0 {
        return r;
    }
    // SAFETY: getaddrinfo succeeded: `found` is a non-empty list.
    let first = unsafe { &*found };
    // SAFETY: calloc of one zeroed rdma_addrinfo (all-NULL pointers); checked below.
    let out = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
    if out.is_null() {
        // SAFETY: the list from getaddrinfo, freed once.
        unsafe { libc::freeaddrinfo(found) };
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: `out` is a fresh, zeroed, exclusively owned rdma_addrinfo.
    let o = unsafe { &mut *out };
    o.ai_flags = flags;
    o.ai_family = first.ai_family;
    o.ai_qp_type = qp_type;
    o.ai_port_space = ps;
    let mut ok = true;
    // SAFETY: `ai_addr` has `ai_addrlen` readable bytes (getaddrinfo's contract).
    let addr = unsafe { dup(first.ai_addr.cast(), first.ai_addrlen as usize) };
    ok &= !addr.is_null();
    if flags & RAI_PASSIVE != 0 {
        o.ai_src_addr = addr.cast();
        o.ai_src_len = first.ai_addrlen;
    } else {
        o.ai_dst_addr = addr.cast();
        o.ai_dst_len = first.ai_addrlen;
        if let Some(h) = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0) {
            // SAFETY: the hints' source address has ai_src_len readable bytes.
            let src = unsafe { dup(h.ai_src_addr.cast(), h.ai_src_len as usize) };
            ok &= !src.is_null();
            o.ai_src_addr = src.cast();
            o.ai_src_len = h.ai_src_len;
        }
    }
    // SAFETY: the list from getaddrinfo, freed once (its addresses were copied).
    unsafe { libc::freeaddrinfo(found) };
    if !ok {
        // SAFETY: `out` is ours, every pointer in it NULL or malloc'd.
        unsafe { rdma_freeaddrinfo(out) };
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: checked non-NULL; the caller's out-pointer is writable.
    unsafe { *res = out };
    0
}
versioned!("RDMACM_1.0", rdma_getaddrinfo);

/// `void rdma_freeaddrinfo(struct rdma_addrinfo *res)`: frees a list from `rdma_getaddrinfo`.
///
/// # Safety
///
/// `res` is NULL or a list from `rdma_getaddrinfo`, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: every node and every pointer in it was malloc'd/calloc'd by
        // rdma_getaddrinfo (or is NULL); each is freed once.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free((*p).ai_src_canonname.cast());
            libc::free((*p).ai_dst_canonname.cast());
            libc::free((*p).ai_route);
            libc::free((*p).ai_connect);
            libc::free(p.cast());
            p = next;
        }
    }
}
versioned!("RDMACM_1.0", rdma_freeaddrinfo);

// ---------------------------------------------------------------------------------------------
// Small complete calls.

/// `const char *rdma_event_str(enum rdma_cm_event_type)`: the enumerator's name, or
/// `"UNKNOWN EVENT"`.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    let s: &'static [u8] = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}
versioned!("RDMACM_1.0", rdma_event_str);

/// `int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)`: `poll` (no rsockets here).
///
/// # Safety
///
/// As `poll`: `fds` has `nfds` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { libc::poll(fds, nfds, timeout) }
}
versioned!("RDMACM_1.0", rpoll);

// ---------------------------------------------------------------------------------------------
// The connection manager: implemented in libibverbs.so.1, which holds the process's one
// stack (device, verbs objects, connection manager, progress thread); these calls find its
// `rdma_stack_*` entry points with dlsym and forward to them.

/// The address of libibverbs' entry point `name` (NUL-terminated), 0 when it is missing.
fn entry(name: &'static [u8]) -> usize {
    use std::sync::OnceLock;
    static LIB: OnceLock<usize> = OnceLock::new();
    let h = *LIB.get_or_init(|| {
        // SAFETY: a NUL-terminated name; RTLD_NOLOAD first (the program links it), else load it.
        let mut h = unsafe {
            libc::dlopen(
                c"libibverbs.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_GLOBAL | libc::RTLD_NOLOAD,
            )
        };
        if h.is_null() {
            // SAFETY: as above.
            h = unsafe {
                libc::dlopen(
                    c"libibverbs.so.1".as_ptr(),
                    libc::RTLD_NOW | libc::RTLD_GLOBAL,
                )
            };
        }
        h as usize
    });
    if h == 0 {
        return 0;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    unsafe { libc::dlsym(h as *mut c_void, name.as_ptr().cast()) as usize }
}

/// Exports `$name` (node `$ver`) forwarding to libibverbs' `rdma_stack_$entry`; without it,
/// `$none` with errno ENOSYS.
macro_rules! forward {
    ($ver:literal, $name:ident => $entry:ident($($a:ident: $t:ty),*) -> $r:ty, $none:expr) => {
        #[doc = concat!("`", stringify!($name), "`: the connection manager's call (in libibverbs.so.1).")]
        ///
        /// # Safety
        ///
        /// As librdmacm's: objects of this library, valid pointers.
        #[unsafe(no_mangle)]
        #[allow(clippy::unused_unit)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
            let f = *F.get_or_init(|| entry(concat!(stringify!($entry), "\0").as_bytes()));
            if f == 0 {
                set_errno(ENOSYS);
                return $none;
            }
            // SAFETY: libibverbs exports the entry with exactly this signature.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { core::mem::transmute(f) };
            // SAFETY: the caller's arguments, passed on.
            unsafe { f($($a),*) }
        }
        versioned!($ver, $name);
    };
}

type Id = *mut rdma_cm_id;
type Chan = *mut rdma_event_channel;
type Sa = *const libc::sockaddr;
type Pd = *mut capi_abi::ibv::ibv_pd;
type InitAttr = *mut capi_abi::ibv::ibv_qp_init_attr;

forward!("RDMACM_1.0", rdma_create_event_channel => rdma_stack_create_event_channel() -> Chan, null_mut());
forward!("RDMACM_1.0", rdma_destroy_event_channel => rdma_stack_destroy_event_channel(ch: Chan) -> (), ());
forward!("RDMACM_1.0", rdma_create_id => rdma_stack_create_id(ch: Chan, id: *mut Id, context: *mut c_void, ps: c_int) -> c_int, -1);
forward!("RDMACM_1.0", rdma_destroy_id => rdma_stack_destroy_id(id: Id) -> c_int, -1);
forward!("RDMACM_1.0", rdma_bind_addr => rdma_stack_bind_addr(id: Id, addr: Sa) -> c_int, -1);
forward!("RDMACM_1.0", rdma_resolve_addr => rdma_stack_resolve_addr(id: Id, src: Sa, dst: Sa, timeout_ms: c_int) -> c_int, -1);
forward!("RDMACM_1.0", rdma_resolve_route => rdma_stack_resolve_route(id: Id, timeout_ms: c_int) -> c_int, -1);
forward!("RDMACM_1.0", rdma_listen => rdma_stack_listen(id: Id, backlog: c_int) -> c_int, -1);
forward!("RDMACM_1.0", rdma_connect => rdma_stack_connect(id: Id, p: *const rdma_conn_param) -> c_int, -1);
forward!("RDMACM_1.0", rdma_accept => rdma_stack_accept(id: Id, p: *const rdma_conn_param) -> c_int, -1);
forward!("RDMACM_1.0", rdma_reject => rdma_stack_reject(id: Id, data: *const c_void, len: u8) -> c_int, -1);
forward!("RDMACM_1.0", rdma_disconnect => rdma_stack_disconnect(id: Id) -> c_int, -1);
forward!("RDMACM_1.0", rdma_get_cm_event => rdma_stack_get_cm_event(ch: Chan, ev: *mut *mut rdma_cm_event) -> c_int, -1);
forward!("RDMACM_1.0", rdma_ack_cm_event => rdma_stack_ack_cm_event(ev: *mut rdma_cm_event) -> c_int, -1);
forward!("RDMACM_1.0", rdma_create_qp => rdma_stack_create_qp(id: Id, pd: Pd, attr: InitAttr) -> c_int, -1);
forward!("RDMACM_1.0", rdma_destroy_qp => rdma_stack_destroy_qp(id: Id) -> (), ());
forward!("RDMACM_1.0", rdma_create_ep => rdma_stack_create_ep(id: *mut Id, res: *const rdma_addrinfo, pd: Pd, attr: InitAttr) -> c_int, -1);
forward!("RDMACM_1.0", rdma_destroy_ep => rdma_stack_destroy_ep(id: Id) -> (), ());
forward!("RDMACM_1.0", rdma_get_request => rdma_stack_get_request(listen: Id, id: *mut Id) -> c_int, -1);
forward!("RDMACM_1.0", rdma_set_option => rdma_stack_set_option(id: Id, level: c_int, name: c_int, val: *const c_void, len: usize) -> c_int, -1);
forward!("RDMACM_1.2", rdma_init_qp_attr => rdma_stack_init_qp_attr(id: Id, attr: *mut capi_abi::ibv::ibv_qp_attr, mask: *mut c_int) -> c_int, -1);
forward!("RDMACM_1.2", rdma_establish => rdma_stack_establish(id: Id) -> c_int, -1);
forward!("RDMACM_1.0", rdma_migrate_id => rdma_stack_migrate_id(id: Id, ch: Chan) -> c_int, -1);

// ---------------------------------------------------------------------------------------------
// Not implemented yet: exported so that programs load (they bind every import at start-up),
// failing the way each call reports errors.

/// Exports functions that return -1 with errno ENOSYS.
macro_rules! enosys_int {
    ($ver:literal: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (-1, errno ENOSYS).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> c_int {
            set_errno(ENOSYS);
            -1
        }
        versioned!($ver, $name);
    )*};
}

enosys_int!("RDMACM_1.0": rdma_create_qp_ex, rdma_leave_multicast);
enosys_int!("RDMACM_1.1": rdma_join_multicast_ex);
