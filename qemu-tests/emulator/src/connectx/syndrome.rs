//! The emulator's own command `syndrome` values, one per failure reason.
//!
//! Real firmware returns a 32-bit syndrome with every failed command, but the values are not
//! public (they are keys into a vendor-internal table). These are this emulator's values; they
//! all have the top byte `0xE5` so they cannot be confused with a zero or a status. The
//! `status` that goes with each is listed in its documentation (a syndrome may be used with
//! more than one status only where noted).

const fn s(n: u32) -> u32 {
    0xE500_0000 | n
}

// ------------------------------------------------------------------ generic

/// BAD_OP: the opcode is not implemented by this device.
pub const BAD_OPCODE: u32 = s(0x01);
/// BAD_PARAM: the `op_mod` is not valid for the opcode (includes unsupported capability pages).
pub const BAD_OP_MOD: u32 = s(0x02);
/// BAD_PARAM: `uid` is not 0 (user contexts are not supported).
pub const BAD_UID: u32 = s(0x03);
/// BAD_INPUT_LEN: `inlen` is shorter than the command's fixed input, or than the list
/// (PAS/MTT/page addresses) the command says follows.
pub const BAD_INLEN: u32 = s(0x04);
/// BAD_OUTPUT_LEN: `outlen` is shorter than the command's output.
pub const BAD_OUTLEN: u32 = s(0x05);
/// BAD_PARAM: a reserved field (e.g. input header dword 1 bits 31:16) is not zero.
pub const RESERVED_NOT_ZERO: u32 = s(0x06);
/// BAD_PARAM: a feature this device does not advertise was requested (SRQ, umem, CQE
/// compression, other_function/other_vport, KLM, UMR, `pg_access`, ...).
pub const UNSUPPORTED: u32 = s(0x07);
/// INTERNAL_ERR: the device raised a fatal health syndrome; no command executes any more.
pub const HEALTH_FATAL: u32 = s(0x08);

// ------------------------------------------------------------------ HCA state

/// BAD_SYS_STATE: the command needs ENABLE_HCA first.
pub const NOT_ENABLED: u32 = s(0x10);
/// BAD_SYS_STATE: ENABLE_HCA on an enabled function.
pub const ALREADY_ENABLED: u32 = s(0x11);
/// BAD_SYS_STATE: the command needs INIT_HCA first (object commands, TEARDOWN_HCA).
pub const NOT_INITIALIZED: u32 = s(0x12);
/// BAD_SYS_STATE: INIT_HCA twice, or SET_HCA_CAP / SET_ISSI after INIT_HCA.
pub const ALREADY_INITIALIZED: u32 = s(0x13);
/// BAD_SYS_STATE: DISABLE_HCA while still initialized (TEARDOWN_HCA first).
pub const STILL_INITIALIZED: u32 = s(0x14);
/// BAD_SYS_STATE: INIT_HCA before `boot_pages + init_pages` pages were given.
pub const PAGES_MISSING: u32 = s(0x15);
/// BAD_PARAM: `function_id` / `embedded_cpu_function` is not 0 (only this function exists).
pub const BAD_FUNCTION_ID: u32 = s(0x16);
/// BAD_PARAM: SET_ISSI with an ISSI other than 0 or 1.
pub const BAD_ISSI: u32 = s(0x17);
/// BAD_PARAM: TEARDOWN_HCA profile other than 0 (graceful) or 1 (force); 2 (fast) is not
/// advertised.
pub const BAD_TEARDOWN_PROFILE: u32 = s(0x18);
/// BAD_RES_STATE: graceful TEARDOWN_HCA while objects (UAR, PD, TD, EQ, CQ, MKEY, QP) are
/// still alive. Real firmware frees them; this device refuses so a leaking driver shows up.
pub const OBJECTS_ALIVE: u32 = s(0x19);

// ------------------------------------------------------------------ pages

/// BAD_PARAM: a page address given with MANAGE_PAGES is not 4 KiB aligned.
pub const BAD_PAGE_ADDRESS: u32 = s(0x20);
/// BAD_PARAM: a page given with MANAGE_PAGES is not mapped in the IOMMU.
pub const PAGE_NOT_MAPPED: u32 = s(0x21);
/// BAD_PARAM: a page given with MANAGE_PAGES is already held (or listed twice).
pub const DUPLICATE_PAGE: u32 = s(0x22);
/// NO_RES: the device would hold more than its page limit (1 << 20 pages).
pub const TOO_MANY_PAGES: u32 = s(0x23);
/// NO_RES: a create waited for pages (a runtime PAGE_REQUEST) and the driver answered
/// MANAGE_PAGES CANT_GIVE.
pub const PAGES_REFUSED: u32 = s(0x24);

// ------------------------------------------------------------------ capabilities, registers

/// BAD_PARAM: SET_HCA_CAP changed a field that is not writable.
pub const CAP_READ_ONLY: u32 = s(0x30);
/// BAD_PARAM: SET_HCA_CAP set a writable field above its maximum.
pub const CAP_ABOVE_MAX: u32 = s(0x31);
/// BAD_PARAM: SET_HCA_CAP with `log_uar_page_sz` other than 0 (4 KiB UARs only).
pub const BAD_UAR_PAGE_SZ: u32 = s(0x32);
/// BAD_PARAM: ACCESS_REG of a register this device does not implement.
pub const BAD_REGISTER: u32 = s(0x33);
/// BAD_PARAM: ACCESS_REG with an invalid register value or argument.
pub const BAD_REGISTER_VALUE: u32 = s(0x34);
/// BAD_PARAM: SET_HCA_CAP (atomic page) with an `atomic_req_8B_endianness_mode` the device
/// does not offer (2 or 3, or host endianness without
/// `supported_atomic_req_8B_endianness_mode_1`).
pub const BAD_ATOMIC_MODE: u32 = s(0x35);
/// BAD_PARAM: ACCESS_REG of a register that belongs to the PF (HOST_ENDIANNESS) on a virtual
/// function.
pub const REGISTER_NOT_ON_VF: u32 = s(0x36);

// ------------------------------------------------------------------ object tables

/// NO_RES: the object table (bounded by the profile) is full.
pub const TABLE_FULL: u32 = s(0x40);
/// BAD_INDEX: the object number is outside the table's range.
pub const BAD_INDEX: u32 = s(0x41);
/// BAD_RES: the object number is in range but names no live object.
pub const NO_SUCH_OBJECT: u32 = s(0x42);
/// BAD_RES_STATE: the object is still used by another (PD by an MKEY/QP, UAR by an EQ/CQ/QP,
/// EQ by a CQ, CQ by a QP, SRQ by a QP, PD by an SRQ).
pub const OBJECT_IN_USE: u32 = s(0x43);

// ------------------------------------------------------------------ context references

/// BAD_PARAM: the context names a PD that does not exist.
pub const BAD_PD: u32 = s(0x50);
/// BAD_PARAM: the context names a UAR page that is not allocated.
pub const BAD_UAR: u32 = s(0x51);
/// BAD_PARAM: the context names a CQ that does not exist.
pub const BAD_CQ: u32 = s(0x52);
/// BAD_PARAM: the context names an EQ that does not exist.
pub const BAD_EQ: u32 = s(0x53);
/// BAD_RES / BAD_INDEX: the command names a QP that does not exist (with BAD_INDEX when out
/// of range).
pub const BAD_QPN: u32 = s(0x54);
/// BAD_PARAM: a QP context with `rq_type` SRQ names an SRQ that does not exist (or one in
/// error).
pub const BAD_SRQ: u32 = s(0x56);

// ------------------------------------------------------------------ buffers

/// BAD_PARAM: a log size (`log_eq_size`, `log_cq_size`, `log_sq_size`, `log_rq_size`) is above
/// the capability.
pub const BAD_LOG_SIZE: u32 = s(0x60);
/// BAD_PARAM: `log_page_size` out of range (queues: 0..=18; MKEY: 12..=30).
pub const BAD_LOG_PAGE_SIZE: u32 = s(0x61);
/// BAD_PARAM: `page_offset` is not 0 (not supported).
pub const BAD_PAGE_OFFSET: u32 = s(0x62);
/// BAD_PARAM: a PAS entry is not aligned to the context's page size.
pub const BAD_PAS: u32 = s(0x63);
/// BAD_PARAM: a buffer page named by the PAS list is not mapped in the IOMMU.
pub const PAS_NOT_MAPPED: u32 = s(0x64);
/// BAD_PARAM: `dbr_addr` is not 8-byte aligned or not mapped.
pub const BAD_DBR: u32 = s(0x65);
/// BAD_PARAM: `cqe_sz` other than 0 (64 B) or 1 (128 B).
pub const BAD_CQE_SIZE: u32 = s(0x66);
/// BAD_PARAM: an RQ WQE stride above `max_wqe_sz_rq`.
pub const BAD_WQE_SIZE: u32 = s(0x67);
/// BAD_PARAM: an SRQ / RMP limit watermark (`lwm`) not below the number of WQEs.
pub const BAD_LWM: u32 = s(0x68);
/// BAD_PARAM: an EQ context's `intr` names no MSI-X vector of the function
/// ([`Profile::msix_vectors`](crate::Profile::msix_vectors)).
pub const BAD_VECTOR: u32 = s(0x69);

// ------------------------------------------------------------------ MKEY

/// BAD_PARAM: `access_mode` other than PA or MTT.
pub const BAD_ACCESS_MODE: u32 = s(0x70);
/// BAD_PARAM: `free = 1` (free mkeys need UMR, not supported).
pub const MKEY_FREE: u32 = s(0x71);
/// BAD_PARAM: mkc `qpn` is not 0xffffff.
pub const BAD_MKEY_QPN: u32 = s(0x72);
/// BAD_PARAM: the translation list is shorter than `start_addr`/`len` need, or
/// `translations_octword_size` is smaller than the actual size, or `length64` with MTT.
pub const MTT_TOO_SHORT: u32 = s(0x73);
/// BAD_PARAM: an MTT entry is not aligned to the mkey page size.
pub const BAD_MTT: u32 = s(0x74);
/// BAD_PARAM: remote write or remote atomic without local write.
pub const BAD_ACCESS_FLAGS: u32 = s(0x75);

// ------------------------------------------------------------------ QP

/// BAD_PARAM: service type not supported (RC, UC, UD and QP1 are).
pub const BAD_ST: u32 = s(0x80);
/// BAD_PARAM: CREATE_QP with `state` other than RST in the context.
pub const BAD_INITIAL_STATE: u32 = s(0x81);
/// BAD_PARAM: a QP with neither SQ nor RQ.
pub const NO_QUEUES: u32 = s(0x82);
/// BAD_QP_STATE: the transition is not legal from the QP's current state.
pub const BAD_STATE_TRANSITION: u32 = s(0x83);
/// BAD_PARAM: port number (`vhca_port_num`) is not 1.
pub const BAD_PORT: u32 = s(0x84);
/// BAD_PARAM: `pkey_index` beyond the P_Key table (128 entries).
pub const BAD_PKEY_INDEX: u32 = s(0x85);
/// BAD_PARAM: `mtu` not in 1..=5.
pub const BAD_MTU: u32 = s(0x86);
/// BAD_PARAM: RC/UC `remote_qpn` is 0 or 1.
pub const BAD_REMOTE_QPN: u32 = s(0x87);
/// BAD_PARAM: address path unusable (RoCE: zero `rgid`/`rmac`, GID index not programmed;
/// IB: zero `rlid`).
pub const BAD_PATH: u32 = s(0x88);
/// BAD_PARAM: an `opt_param_mask` bit that is not allowed for this transition / service type.
pub const BAD_OPT_PARAM: u32 = s(0x89);
/// BAD_PARAM: a modify command changed a field fixed at CREATE_QP (st, pd, cqns, uar, sizes,
/// dbr_addr); 0 means "not given" and is accepted.
pub const IMMUTABLE_FIELD: u32 = s(0x8a);
/// BAD_PARAM: `log_sra_max` / `log_rra_max` above the capability.
pub const BAD_RA_DEPTH: u32 = s(0x8b);
/// BAD_PARAM: `log_msg_max` above `log_max_msg`.
pub const BAD_MSG_SIZE: u32 = s(0x8c);
/// NO_RES: a second QP1 (GSI) on the port.
pub const QP1_EXISTS: u32 = s(0x8d);
/// BAD_PARAM: INIT2RTR on a RoCE port while RoCE is disabled in the NIC vport context.
pub const ROCE_DISABLED: u32 = s(0x8e);

// ------------------------------------------------------------------ vport / GIDs

/// BAD_PARAM: GID (RoCE address) index beyond the 16-entry table.
pub const BAD_GID_INDEX: u32 = s(0x90);
/// BAD_PARAM: RoCE address entry with an unknown `roce_version` / `roce_l3_type`.
pub const BAD_GID_ENTRY: u32 = s(0x91);
/// BAD_PARAM: RoCE command on an InfiniBand port.
pub const NOT_ROCE: u32 = s(0x92);
/// BAD_PARAM: `other_vport` / `vport_number` not 0.
pub const BAD_VPORT: u32 = s(0x93);
/// BAD_PARAM: MODIFY_NIC_VPORT_CONTEXT `field_select` bit this device does not implement.
pub const BAD_FIELD_SELECT: u32 = s(0x94);
