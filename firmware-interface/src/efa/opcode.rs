//! Admin opcodes (`docs/efa.md#admin-commands`, `efa_admin_aq_opcode`).

/// Create a UD or SRD QP.
pub const CREATE_QP: u8 = 1;
/// Modify a QP (state, Q_Key, SQ PSN, RNR retry).
pub const MODIFY_QP: u8 = 2;
/// Query a QP.
pub const QUERY_QP: u8 = 3;
/// Destroy a QP.
pub const DESTROY_QP: u8 = 4;
/// Create an address handle.
pub const CREATE_AH: u8 = 5;
/// Destroy an address handle.
pub const DESTROY_AH: u8 = 6;
/// Register a memory region.
pub const REG_MR: u8 = 7;
/// Deregister a memory region.
pub const DEREG_MR: u8 = 8;
/// Create a completion queue.
pub const CREATE_CQ: u8 = 9;
/// Destroy a completion queue.
pub const DESTROY_CQ: u8 = 10;
/// Read a feature block.
pub const GET_FEATURE: u8 = 11;
/// Write a feature block.
pub const SET_FEATURE: u8 = 12;
/// Read statistics.
pub const GET_STATS: u8 = 13;
/// Allocate a protection domain.
pub const ALLOC_PD: u8 = 14;
/// Free a protection domain.
pub const DEALLOC_PD: u8 = 15;
/// Allocate a user access region (doorbell page context).
pub const ALLOC_UAR: u8 = 16;
/// Free a user access region.
pub const DEALLOC_UAR: u8 = 17;
/// Create an event queue.
pub const CREATE_EQ: u8 = 18;
/// Destroy an event queue.
pub const DESTROY_EQ: u8 = 19;
/// Allocate a fast-registration MR (newer devices).
pub const ALLOC_MR: u8 = 20;

/// Every opcode as `(value, name)`.
pub const ALL: &[(u8, &str)] = &[
    (CREATE_QP, "CREATE_QP"),
    (MODIFY_QP, "MODIFY_QP"),
    (QUERY_QP, "QUERY_QP"),
    (DESTROY_QP, "DESTROY_QP"),
    (CREATE_AH, "CREATE_AH"),
    (DESTROY_AH, "DESTROY_AH"),
    (REG_MR, "REG_MR"),
    (DEREG_MR, "DEREG_MR"),
    (CREATE_CQ, "CREATE_CQ"),
    (DESTROY_CQ, "DESTROY_CQ"),
    (GET_FEATURE, "GET_FEATURE"),
    (SET_FEATURE, "SET_FEATURE"),
    (GET_STATS, "GET_STATS"),
    (ALLOC_PD, "ALLOC_PD"),
    (DEALLOC_PD, "DEALLOC_PD"),
    (ALLOC_UAR, "ALLOC_UAR"),
    (DEALLOC_UAR, "DEALLOC_UAR"),
    (CREATE_EQ, "CREATE_EQ"),
    (DESTROY_EQ, "DESTROY_EQ"),
    (ALLOC_MR, "ALLOC_MR"),
];

/// The name of an opcode, for logs; `None` if unknown.
pub fn name(op: u8) -> Option<&'static str> {
    ALL.iter().find(|o| o.0 == op).map(|o| o.1)
}
