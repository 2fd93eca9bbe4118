//! Initialization segment: the first 0x2010 bytes of BAR0
//! (`docs/mlx5.md#initialization-segment`, `device.h struct mlx5_init_seg`). All registers are
//! 32-bit big-endian; offsets are BAR0 byte offsets.

/// `fw_rev`: bits 31:16 FW minor, bits 15:0 FW major.
pub const FW_REV: usize = 0x0;
/// `cmdif_rev_fw_sub`: bits 31:16 command interface revision (must be [`CMDIF_REV`]),
/// bits 15:0 FW sub-minor.
pub const CMDIF_REV_FW_SUB: usize = 0x4;
/// `cmdq_addr_h`: bits 63:32 of the command queue DMA address.
pub const CMDQ_ADDR_H: usize = 0x10;
/// `cmdq_addr_l_sz`: write: address bits 31:12; read: address, nic_interface (10:8),
/// log_cmdq_size (7:4), log_cmdq_stride (3:0).
pub const CMDQ_ADDR_L_SZ: usize = 0x14;
/// `cmd_dbell`: write BE32 `1 << slot` to hand command slot(s) to firmware.
pub const CMD_DBELL: usize = 0x18;
/// `initializing`: bit 31 = firmware still initializing.
pub const INITIALIZING: usize = 0x1fc;
/// `health`: the 64-byte health buffer (see [`health`]).
pub const HEALTH: usize = 0x200;
/// `cmd_exec_to`: firmware command execution timeout (0 = not advertised), see [`TO_MULT_SHIFT`].
pub const CMD_EXEC_TO: usize = 0xff8;
/// `cmd_q_init_to`: firmware "initializing" wait timeout, same encoding.
pub const CMD_Q_INIT_TO: usize = 0xffc;
/// `internal_timer_h`: free-running device clock, high 32 bits.
pub const INTERNAL_TIMER_H: usize = 0x1000;
/// `internal_timer_l`: free-running device clock, low 32 bits.
pub const INTERNAL_TIMER_L: usize = 0x1004;
/// `health_counter`: bits 23:0 heartbeat incremented by firmware.
pub const HEALTH_COUNTER: usize = 0x1010;
/// `real_time_h`: real-time (PTP) clock high word (optional).
pub const REAL_TIME_H: usize = 0x1040;
/// `real_time_l`: real-time (PTP) clock low word (optional).
pub const REAL_TIME_L: usize = 0x1044;
/// Size of the initialization segment as Linux maps it (`sizeof(struct mlx5_init_seg)`).
pub const SIZE: usize = 0x2010;

/// `initializing` bit 31: 1 while firmware is not ready.
pub const INITIALIZING_BIT: u32 = 1 << 31;
/// `initializing` bit 30: firmware reset supported (`MLX5_FW_RESET_SUPPORTED_OFFSET`).
pub const FW_RESET_SUPPORTED_BIT: u32 = 1 << 30;
/// Required command interface revision (`CMD_IF_REV`), in bits 31:16 of [`CMDIF_REV_FW_SUB`].
pub const CMDIF_REV: u32 = 5;
/// Shift of the cmd interface revision inside [`CMDIF_REV_FW_SUB`].
pub const CMDIF_REV_SHIFT: u32 = 16;
/// Shift of `nic_interface` in [`CMDQ_ADDR_L_SZ`].
pub const NIC_IF_SHIFT: u32 = 8;
/// Mask of `nic_interface` after shifting (Linux reads 3 bits).
pub const NIC_IF_MASK: u32 = 7;
/// nic_interface: full driver.
pub const NIC_IF_FULL_DRIVER: u32 = 0;
/// nic_interface: disabled (fast teardown writes this).
pub const NIC_IF_DISABLED: u32 = 1;
/// nic_interface: no-DRAM NIC.
pub const NIC_IF_NO_DRAM: u32 = 2;
/// nic_interface: software reset (fatal).
pub const NIC_IF_SW_RESET: u32 = 7;
/// Shift of `log_cmdq_size` in [`CMDQ_ADDR_L_SZ`].
pub const LOG_CMDQ_SIZE_SHIFT: u32 = 4;
/// Mask of `log_cmdq_size` after shifting.
pub const LOG_CMDQ_SIZE_MASK: u32 = 0xf;
/// Mask of `log_cmdq_stride` (bits 3:0, no shift).
pub const LOG_CMDQ_STRIDE_MASK: u32 = 0xf;
/// The address bits of [`CMDQ_ADDR_L_SZ`] (the queue is 4 KB aligned).
pub const CMDQ_ADDR_L_MASK: u32 = 0xffff_f000;
/// Mask of the heartbeat bits of [`HEALTH_COUNTER`].
pub const HEALTH_COUNTER_MASK: u32 = 0x00ff_ffff;
/// Timeout registers: shift of the multiplier (bits 31:29).
pub const TO_MULT_SHIFT: u32 = 29;
/// Timeout registers: mask of the multiplier after shifting: two bits, 0 ms, 1 s, 2 min, 3 h
/// (Linux `tout_convert_reg_field_to_ms` masks `to_mul & 0x3`; bit 31 is not part of it).
pub const TO_MULT_MASK: u32 = 0x3;
/// Timeout registers: mask of the value (bits 19:0).
pub const TO_VAL_MASK: u32 = 0xf_ffff;

/// Offsets inside the 64-byte health buffer at BAR0 [`HEALTH`] (`device.h struct health_buffer`).
pub mod health {
    /// `assert_var[6]`: firmware assert variables (6 × BE32).
    pub const ASSERT_VAR: usize = 0x0;
    /// `assert_exit_ptr` (BE32).
    pub const ASSERT_EXIT_PTR: usize = 0x20;
    /// `assert_callra` (BE32).
    pub const ASSERT_CALLRA: usize = 0x24;
    /// `time` (BE32).
    pub const TIME: usize = 0x2c;
    /// `fw_ver` (BE32); 0xffffffff means the PCI link is dead.
    pub const FW_VER: usize = 0x30;
    /// `hw_id` (BE32).
    pub const HW_ID: usize = 0x34;
    /// `rfr_severity` (u8): bit 7 reset required, bit 6 CRR, low nibble severity + valid.
    pub const RFR_SEVERITY: usize = 0x38;
    /// `irisc_index` (u8).
    pub const IRISC_INDEX: usize = 0x3c;
    /// `synd` (u8): health syndrome, 0 = healthy (see [`super::health_synd`]).
    pub const SYND: usize = 0x3d;
    /// `ext_synd` (BE16).
    pub const EXT_SYND: usize = 0x3e;
    /// Size of the health buffer.
    pub const SIZE: usize = 0x40;
    /// `rfr_severity` bit 7: reset required.
    pub const RFR_BIT: u8 = 0x80;
    /// `rfr_severity` bit 6: CRR.
    pub const CRR_BIT: u8 = 0x40;
    /// `fw_ver` value read when the PCI link is gone.
    pub const FW_VER_DEAD: u32 = 0xffff_ffff;
}

/// Health syndromes (`synd`, `MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`).
pub mod health_synd {
    /// 0x1: firmware internal error.
    pub const FW_INTERNAL_ERR: u8 = 0x1;
    /// 0x7: dead IRISC.
    pub const DEAD_IRISC: u8 = 0x7;
    /// 0x8: hardware fatal error.
    pub const HW_FATAL_ERR: u8 = 0x8;
    /// 0x9: firmware CRC error.
    pub const FW_CRC_ERR: u8 = 0x9;
    /// 0xa: ICM fetch PCI error.
    pub const ICM_FETCH_PCI_ERR: u8 = 0xa;
    /// 0xb: ICM page error.
    pub const ICM_PAGE_ERR: u8 = 0xb;
    /// 0xc: asynchronous EQ buffer overrun.
    pub const ASYNCHRONOUS_EQ_BUF_OVERRUN: u8 = 0xc;
    /// 0xd: EQ in error.
    pub const EQ_IN_ERR: u8 = 0xd;
    /// 0xe: EQ invalid.
    pub const EQ_INV: u8 = 0xe;
    /// 0xf: FFSER error.
    pub const FFSER_ERR: u8 = 0xf;
    /// 0x10: high temperature.
    pub const HIGH_TEMP_ERR: u8 = 0x10;
    /// 0x12: ICM PCI poisoned.
    pub const ICM_PCI_POISONED_ERR: u8 = 0x12;
    /// 0x13: trust lockdown error.
    pub const TRUST_LOCKDOWN_ERR: u8 = 0x13;
}
