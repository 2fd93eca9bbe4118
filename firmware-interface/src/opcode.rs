//! Command opcodes (`docs/mlx5.md#opcodes`, `mlx5_ifc.h MLX5_CMD_OP_*`, without the prefix).

/// `0x100`: Query a capability page (op_mod = cap_type << 1 | mode).
pub const QUERY_HCA_CAP: u16 = 0x100;
/// `0x101`: Query adapter information (vendor id, PSID).
pub const QUERY_ADAPTER: u16 = 0x101;
/// `0x102`: Initialize the HCA after capabilities and init pages are set.
pub const INIT_HCA: u16 = 0x102;
/// `0x103`: Tear the HCA down (profile selects graceful/force/fast).
pub const TEARDOWN_HCA: u16 = 0x103;
/// `0x104`: Enable the function (first command after the cmdq is up).
pub const ENABLE_HCA: u16 = 0x104;
/// `0x105`: Disable the function (last command).
pub const DISABLE_HCA: u16 = 0x105;
/// `0x107`: Ask how many pages firmware needs (op_mod boot/init/regular).
pub const QUERY_PAGES: u16 = 0x107;
/// `0x108`: Give pages to, or take pages back from, firmware.
pub const MANAGE_PAGES: u16 = 0x108;
/// `0x109`: Set a capability page (op_mod = cap_type << 1).
pub const SET_HCA_CAP: u16 = 0x109;
/// `0x10a`: Query the supported interface step sequence IDs.
pub const QUERY_ISSI: u16 = 0x10a;
/// `0x10b`: Select the interface step sequence ID.
pub const SET_ISSI: u16 = 0x10b;
/// `0x10d`: Tell firmware the driver version string.
pub const SET_DRIVER_VERSION: u16 = 0x10d;
/// `0x200`: Create a memory key.
pub const CREATE_MKEY: u16 = 0x200;
/// `0x201`: Query a memory key.
pub const QUERY_MKEY: u16 = 0x201;
/// `0x202`: Destroy a memory key.
pub const DESTROY_MKEY: u16 = 0x202;
/// `0x203`: Query the reserved keys (resd_lkey, null_mkey, ...).
pub const QUERY_SPECIAL_CONTEXTS: u16 = 0x203;
/// `0x301`: Create an event queue.
pub const CREATE_EQ: u16 = 0x301;
/// `0x302`: Destroy an event queue.
pub const DESTROY_EQ: u16 = 0x302;
/// `0x303`: Query an event queue.
pub const QUERY_EQ: u16 = 0x303;
/// `0x304`: Generate an EQE (debug).
pub const GEN_EQE: u16 = 0x304;
/// `0x400`: Create a completion queue.
pub const CREATE_CQ: u16 = 0x400;
/// `0x401`: Destroy a completion queue.
pub const DESTROY_CQ: u16 = 0x401;
/// `0x402`: Query a completion queue.
pub const QUERY_CQ: u16 = 0x402;
/// `0x403`: Modify (moderate / resize) a completion queue.
pub const MODIFY_CQ: u16 = 0x403;
/// `0x500`: Create a queue pair (state RST).
pub const CREATE_QP: u16 = 0x500;
/// `0x501`: Destroy a queue pair.
pub const DESTROY_QP: u16 = 0x501;
/// `0x502`: QP transition RESET -> INIT.
pub const RST2INIT_QP: u16 = 0x502;
/// `0x503`: QP transition INIT -> RTR.
pub const INIT2RTR_QP: u16 = 0x503;
/// `0x504`: QP transition RTR -> RTS.
pub const RTR2RTS_QP: u16 = 0x504;
/// `0x505`: QP transition RTS -> RTS (modify attributes).
pub const RTS2RTS_QP: u16 = 0x505;
/// `0x506`: QP transition SQ-error -> RTS.
pub const SQERR2RTS_QP: u16 = 0x506;
/// `0x507`: QP transition any -> ERR (PRM `2ERR_QP`).
pub const QP_2ERR: u16 = 0x507;
/// `0x50a`: QP transition any -> RESET (PRM `2RST_QP`).
pub const QP_2RST: u16 = 0x50a;
/// `0x50b`: Query a queue pair context.
pub const QUERY_QP: u16 = 0x50b;
/// `0x50c`: QP transition SQ-drained -> RTS.
pub const SQD_RTS_QP: u16 = 0x50c;
/// `0x50d`: Process a MAD through firmware.
pub const MAD_IFC: u16 = 0x50d;
/// `0x50e`: QP transition INIT -> INIT.
pub const INIT2INIT_QP: u16 = 0x50e;
/// `0x700`: Create a shared receive queue.
pub const CREATE_SRQ: u16 = 0x700;
/// `0x701`: Destroy a shared receive queue.
pub const DESTROY_SRQ: u16 = 0x701;
/// `0x750`: Query the vport link state.
pub const QUERY_VPORT_STATE: u16 = 0x750;
/// `0x754`: Query the NIC vport context (MAC, MTU, roce_en).
pub const QUERY_NIC_VPORT_CONTEXT: u16 = 0x754;
/// `0x755`: Modify the NIC vport context (e.g. roce_en).
pub const MODIFY_NIC_VPORT_CONTEXT: u16 = 0x755;
/// `0x760`: Read one RoCE GID table entry.
pub const QUERY_ROCE_ADDRESS: u16 = 0x760;
/// `0x761`: Write one RoCE GID table entry.
pub const SET_ROCE_ADDRESS: u16 = 0x761;
/// `0x762`: Query the IB HCA vport context (LID, port state).
pub const QUERY_HCA_VPORT_CONTEXT: u16 = 0x762;
/// `0x763`: Modify the IB HCA vport context.
pub const MODIFY_HCA_VPORT_CONTEXT: u16 = 0x763;
/// `0x764`: Query IB GIDs.
pub const QUERY_HCA_VPORT_GID: u16 = 0x764;
/// `0x765`: Query IB P_Keys.
pub const QUERY_HCA_VPORT_PKEY: u16 = 0x765;
/// `0x90c`: Create a receive memory pool (the SRQ of ISSI 1).
pub const CREATE_RMP: u16 = 0x90c;
/// `0x90d`: Modify a receive memory pool (its limit watermark).
pub const MODIFY_RMP: u16 = 0x90d;
/// `0x90e`: Destroy a receive memory pool.
pub const DESTROY_RMP: u16 = 0x90e;
/// `0x90f`: Query a receive memory pool.
pub const QUERY_RMP: u16 = 0x90f;
/// `0x800`: Allocate a protection domain.
pub const ALLOC_PD: u16 = 0x800;
/// `0x801`: Free a protection domain.
pub const DEALLOC_PD: u16 = 0x801;
/// `0x802`: Allocate a UAR page index.
pub const ALLOC_UAR: u16 = 0x802;
/// `0x803`: Free a UAR page index.
pub const DEALLOC_UAR: u16 = 0x803;
/// `0x805`: Read or write a device register (op_mod 1 = read, 0 = write).
pub const ACCESS_REG: u16 = 0x805;
/// `0x806`: Attach a QP to a multicast group.
pub const ATTACH_TO_MCG: u16 = 0x806;
/// `0x807`: Detach a QP from a multicast group.
pub const DETACH_FROM_MCG: u16 = 0x807;
/// `0x80d`: No operation (header only).
pub const NOP: u16 = 0x80d;
/// `0x80e`: Allocate an XRC domain.
pub const ALLOC_XRCD: u16 = 0x80e;
/// `0x80f`: Free an XRC domain.
pub const DEALLOC_XRCD: u16 = 0x80f;
/// `0x816`: Allocate a transport domain.
pub const ALLOC_TRANSPORT_DOMAIN: u16 = 0x816;
/// `0x817`: Free a transport domain.
pub const DEALLOC_TRANSPORT_DOMAIN: u16 = 0x817;

/// Every opcode of this module as `(opcode, name)`, in ascending order.
pub const ALL: &[(u16, &str)] = &[
    (QUERY_HCA_CAP, "QUERY_HCA_CAP"),
    (QUERY_ADAPTER, "QUERY_ADAPTER"),
    (INIT_HCA, "INIT_HCA"),
    (TEARDOWN_HCA, "TEARDOWN_HCA"),
    (ENABLE_HCA, "ENABLE_HCA"),
    (DISABLE_HCA, "DISABLE_HCA"),
    (QUERY_PAGES, "QUERY_PAGES"),
    (MANAGE_PAGES, "MANAGE_PAGES"),
    (SET_HCA_CAP, "SET_HCA_CAP"),
    (QUERY_ISSI, "QUERY_ISSI"),
    (SET_ISSI, "SET_ISSI"),
    (SET_DRIVER_VERSION, "SET_DRIVER_VERSION"),
    (CREATE_MKEY, "CREATE_MKEY"),
    (QUERY_MKEY, "QUERY_MKEY"),
    (DESTROY_MKEY, "DESTROY_MKEY"),
    (QUERY_SPECIAL_CONTEXTS, "QUERY_SPECIAL_CONTEXTS"),
    (CREATE_EQ, "CREATE_EQ"),
    (DESTROY_EQ, "DESTROY_EQ"),
    (QUERY_EQ, "QUERY_EQ"),
    (GEN_EQE, "GEN_EQE"),
    (CREATE_CQ, "CREATE_CQ"),
    (DESTROY_CQ, "DESTROY_CQ"),
    (QUERY_CQ, "QUERY_CQ"),
    (MODIFY_CQ, "MODIFY_CQ"),
    (CREATE_QP, "CREATE_QP"),
    (DESTROY_QP, "DESTROY_QP"),
    (RST2INIT_QP, "RST2INIT_QP"),
    (INIT2RTR_QP, "INIT2RTR_QP"),
    (RTR2RTS_QP, "RTR2RTS_QP"),
    (RTS2RTS_QP, "RTS2RTS_QP"),
    (SQERR2RTS_QP, "SQERR2RTS_QP"),
    (QP_2ERR, "QP_2ERR"),
    (QP_2RST, "QP_2RST"),
    (QUERY_QP, "QUERY_QP"),
    (SQD_RTS_QP, "SQD_RTS_QP"),
    (MAD_IFC, "MAD_IFC"),
    (INIT2INIT_QP, "INIT2INIT_QP"),
    (CREATE_SRQ, "CREATE_SRQ"),
    (DESTROY_SRQ, "DESTROY_SRQ"),
    (QUERY_VPORT_STATE, "QUERY_VPORT_STATE"),
    (QUERY_NIC_VPORT_CONTEXT, "QUERY_NIC_VPORT_CONTEXT"),
    (MODIFY_NIC_VPORT_CONTEXT, "MODIFY_NIC_VPORT_CONTEXT"),
    (QUERY_ROCE_ADDRESS, "QUERY_ROCE_ADDRESS"),
    (SET_ROCE_ADDRESS, "SET_ROCE_ADDRESS"),
    (QUERY_HCA_VPORT_CONTEXT, "QUERY_HCA_VPORT_CONTEXT"),
    (MODIFY_HCA_VPORT_CONTEXT, "MODIFY_HCA_VPORT_CONTEXT"),
    (QUERY_HCA_VPORT_GID, "QUERY_HCA_VPORT_GID"),
    (QUERY_HCA_VPORT_PKEY, "QUERY_HCA_VPORT_PKEY"),
    (ALLOC_PD, "ALLOC_PD"),
    (DEALLOC_PD, "DEALLOC_PD"),
    (ALLOC_UAR, "ALLOC_UAR"),
    (DEALLOC_UAR, "DEALLOC_UAR"),
    (ACCESS_REG, "ACCESS_REG"),
    (ATTACH_TO_MCG, "ATTACH_TO_MCG"),
    (DETACH_FROM_MCG, "DETACH_FROM_MCG"),
    (NOP, "NOP"),
    (ALLOC_XRCD, "ALLOC_XRCD"),
    (DEALLOC_XRCD, "DEALLOC_XRCD"),
    (ALLOC_TRANSPORT_DOMAIN, "ALLOC_TRANSPORT_DOMAIN"),
    (DEALLOC_TRANSPORT_DOMAIN, "DEALLOC_TRANSPORT_DOMAIN"),
    (CREATE_RMP, "CREATE_RMP"),
    (MODIFY_RMP, "MODIFY_RMP"),
    (DESTROY_RMP, "DESTROY_RMP"),
    (QUERY_RMP, "QUERY_RMP"),
];

/// The PRM name of an opcode (without `MLX5_CMD_OP_`), for logs; `None` if unknown.
pub fn name(op: u16) -> Option<&'static str> {
    ALL.iter().find(|(o, _)| *o == op).map(|(_, n)| *n)
}
