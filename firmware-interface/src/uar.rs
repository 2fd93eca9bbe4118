//! UAR pages and doorbell registers (`docs/mlx5.md#uar-pages-and-doorbells`). Offsets are inside
//! one 4 KB UAR page at BAR0 + uar_index × [`PAGE_SIZE`].

/// Size of one UAR page (4 KB UARs).
pub const PAGE_SIZE: usize = 4096;
/// CQ doorbell (64-bit): upper BE32 = `(sn & 3) << 28 | cmd | (ci & 0xffffff)`, lower = cqn.
pub const CQ_DOORBELL: usize = 0x20;
/// EQ doorbell, update CI and re-arm: BE32 `(eqn << 24) | (ci & 0xffffff)`.
pub const EQ_DOORBELL_ARM: usize = 0x40;
/// EQ doorbell, update CI without arming (same value).
pub const EQ_DOORBELL_NOARM: usize = 0x48;
/// First send doorbell / BlueFlame register (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: usize = 0x800;
/// BlueFlame registers per 4 KB UAR (`MLX5_BFREGS_PER_UAR`), at `BF_OFFSET + k * bf_reg_size`.
pub const BFREGS_PER_UAR: usize = 4;
/// Of which "regular" (non fast path) (`MLX5_NON_FP_BFREGS_PER_UAR`).
pub const NON_FP_BFREGS_PER_UAR: usize = 2;
/// CQ arm command: notify on the next completion (`MLX5_CQ_DB_REQ_NOT`).
pub const CQ_DB_REQ_NOT: u32 = 0;
/// CQ arm command: notify on the next solicited completion (`MLX5_CQ_DB_REQ_NOT_SOL`).
pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// Shift of the 2-bit arm sequence number.
pub const CQ_DB_SN_SHIFT: u32 = 28;
/// Mask of the arm sequence number (before shifting).
pub const CQ_DB_SN_MASK: u32 = 3;
/// Mask of the consumer index in CQ/EQ doorbells.
pub const CI_MASK: u32 = 0x00ff_ffff;
/// Shift of the EQ number in EQ doorbells.
pub const EQ_DB_EQN_SHIFT: u32 = 24;

/// Doorbell records in host memory (`docs/mlx5.md#doorbell-records`): byte offsets inside one
/// record.
pub mod dbr {
    /// QP receive counter (`MLX5_RCV_DBR`), BE32, low 16 bits significant.
    pub const QP_RCV: usize = 0;
    /// QP send counter (`MLX5_SND_DBR`), BE32, SQ producer index in WQEBBs, low 16 bits.
    pub const QP_SND: usize = 4;
    /// CQ consumer index (`MLX5_CQ_SET_CI`), BE32 `ci & 0xffffff`.
    pub const CQ_SET_CI: usize = 0;
    /// CQ arm record (`MLX5_CQ_ARM_DB`), BE32, same value as the UAR CQ doorbell upper half.
    pub const CQ_ARM: usize = 4;
    /// Space drivers reserve per record (one per cache line).
    pub const RECORD_SIZE: usize = 64;
    /// Bytes actually used by a record (two BE32 words).
    pub const MIN_RECORD_SIZE: usize = 8;
}
