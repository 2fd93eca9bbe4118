//! Command interface: queue entries, mailbox blocks and the common headers
//! (`docs/mlx5.md#command-interface`).

use crate::field::{Be32, Be64};

/// Size of one command queue entry.
pub const ENTRY_SIZE: usize = 64;
/// Size of one mailbox block.
pub const MAILBOX_SIZE: usize = 576;
/// Payload bytes per mailbox block.
pub const MAILBOX_DATA: usize = 512;
/// Alignment drivers use for mailbox blocks (Linux: 1 KB DMA pool; exact minimum UNVERIFIED).
pub const MAILBOX_ALIGN: usize = 1024;
/// `type` of every entry: PCI transport (`MLX5_PCI_CMD_XPORT`).
pub const XPORT_TYPE_PCI: u8 = 7;
/// `status_own` bit 0: hardware (firmware) owns the entry.
pub const OWNER_HW: u8 = 1;
/// Bytes of input/output that travel inline in the entry (the common headers).
pub const INLINE_LEN: usize = 16;
/// Maximum number of command queue entries (`1 << log_cmdq_size` must not exceed this).
pub const MAX_ENTRIES: usize = 32;
/// Size and alignment of the command queue page.
pub const QUEUE_PAGE_SIZE: usize = 4096;

/// Command queue entry (`struct mlx5_cmd_layout`, 64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CmdLayout {
    /// Transport type, always [`XPORT_TYPE_PCI`].
    pub type_: u8,
    /// Reserved, 0.
    pub rsvd0: [u8; 3],
    /// Total input length in bytes, including the 16 inline bytes.
    pub inlen: Be32,
    /// DMA address of the first input mailbox block (when `inlen > 16`).
    pub in_ptr: Be64,
    /// First 16 bytes of the input (the input header).
    pub in_: [u8; 16],
    /// First 16 bytes of the output (the output header), written by firmware.
    pub out: [u8; 16],
    /// DMA address of the first output mailbox block (when `outlen > 16`).
    pub out_ptr: Be64,
    /// Total output length in bytes, including the 16 inline bytes.
    pub outlen: Be32,
    /// Per-command token; equals the token of every mailbox block of the command.
    pub token: u8,
    /// `~XOR` of all 64 bytes computed with `sig = 0` (see [`signature`]).
    pub sig: u8,
    /// Reserved.
    pub rsvd1: u8,
    /// Bit 0: ownership (1 = hardware); bits 7:1: delivery status after completion.
    pub status_own: u8,
}

raw_struct!(
    CmdLayout,
    64,
    [
        type_, rsvd0, inlen, in_ptr, in_, out, out_ptr, outlen, token, sig, rsvd1, status_own
    ]
);

impl CmdLayout {
    /// An all-zero entry.
    pub const fn zeroed() -> Self {
        CmdLayout {
            type_: 0,
            rsvd0: [0; 3],
            inlen: Be32::new(0),
            in_ptr: Be64::new(0),
            in_: [0; 16],
            out: [0; 16],
            out_ptr: Be64::new(0),
            outlen: Be32::new(0),
            token: 0,
            sig: 0,
            rsvd1: 0,
            status_own: 0,
        }
    }

    /// Delivery status of a completed entry (`status_own >> 1`, see `delivery_status`).
    pub const fn delivery_status(&self) -> u8 {
        self.status_own >> 1
    }

    /// Whether hardware still owns the entry (`status_own & 1`).
    pub const fn hw_owned(&self) -> bool {
        self.status_own & OWNER_HW != 0
    }
}

/// Byte offset of `status_own` inside an entry (written last by firmware).
pub const STATUS_OWN_OFFSET: usize = 0x3f;
/// Byte offset of `sig` inside an entry.
pub const SIG_OFFSET: usize = 0x3d;

/// Command mailbox block (`struct mlx5_cmd_prot_block`, 576 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MailboxBlock {
    /// Payload: the next 512 bytes of the message.
    pub data: [u8; 512],
    /// Reserved.
    pub rsvd: [u8; 48],
    /// DMA address of the next block, 0 in the last block.
    pub next: Be64,
    /// 0-based index of this block in the chain.
    pub block_num: Be32,
    /// Reserved.
    pub rsvd1: u8,
    /// Same value as the entry's token.
    pub token: u8,
    /// `~XOR` of bytes 0x200..0x23d (only when checksums are enabled).
    pub ctrl_sig: u8,
    /// `~XOR` of bytes 0x000..0x23e (only when checksums are enabled).
    pub sig: u8,
}

raw_struct!(
    MailboxBlock,
    576,
    [data, rsvd, next, block_num, rsvd1, token, ctrl_sig, sig]
);

impl MailboxBlock {
    /// An all-zero block.
    pub const fn zeroed() -> Self {
        MailboxBlock {
            data: [0; 512],
            rsvd: [0; 48],
            next: Be64::new(0),
            block_num: Be32::new(0),
            rsvd1: 0,
            token: 0,
            ctrl_sig: 0,
            sig: 0,
        }
    }
}

impl Default for MailboxBlock {
    fn default() -> Self {
        Self::zeroed()
    }
}

/// Byte offset of `next` in a mailbox block.
pub const MAILBOX_NEXT_OFFSET: usize = 0x230;
/// Byte offset of `block_num` in a mailbox block.
pub const MAILBOX_BLOCK_NUM_OFFSET: usize = 0x238;
/// Byte offset of `token` in a mailbox block.
pub const MAILBOX_TOKEN_OFFSET: usize = 0x23d;
/// Byte offset of `ctrl_sig` in a mailbox block.
pub const MAILBOX_CTRL_SIG_OFFSET: usize = 0x23e;
/// Byte offset of `sig` in a mailbox block.
pub const MAILBOX_SIG_OFFSET: usize = 0x23f;
/// The bytes covered by `ctrl_sig`: `0x200..0x23e` of the block.
pub const MAILBOX_CTRL_SIG_RANGE: core::ops::Range<usize> = 0x200..0x23e;
/// The bytes covered by `sig`: `0x000..0x23f` of the block.
pub const MAILBOX_SIG_RANGE: core::ops::Range<usize> = 0x000..0x23f;

/// PRM signature: `!XOR` of all bytes. For an entry, compute it over the 64 bytes with `sig = 0`;
/// for a mailbox, over [`MAILBOX_CTRL_SIG_RANGE`] / [`MAILBOX_SIG_RANGE`]. A buffer whose
/// signature byte holds this value (and was 0 when computed) XORs to 0xff.
pub fn signature(bytes: &[u8]) -> u8 {
    !bytes.iter().fold(0u8, |acc, b| acc ^ b)
}

/// Number of mailbox blocks for a message of `len` bytes: `ceil((len - 16) / 512)`, 0 when
/// `len <= 16`.
pub const fn mailbox_count(len: usize) -> usize {
    if len <= INLINE_LEN {
        0
    } else {
        (len - INLINE_LEN).div_ceil(MAILBOX_DATA)
    }
}

/// Common input header of every command (`mlx5_ifc mbox_in`), in the entry's `in_`.
pub mod mbox_in {
    use crate::field::Field;
    /// Size of the common input header.
    pub const HEADER_SIZE: usize = 16;
    /// `opcode` (16 bits), see `crate::opcode`.
    pub const OPCODE: Field = Field::dw(0x0, 31, 16);
    /// `uid` (16 bits), 0 for the privileged user.
    pub const UID: Field = Field::dw(0x0, 15, 0);
    /// `op_mod` (16 bits), see `crate::op_mod`.
    pub const OP_MOD: Field = Field::dw(0x4, 15, 0);
}

/// Common output header of every command (`mlx5_ifc mbox_out`), in the entry's `out`.
pub mod mbox_out {
    use crate::field::Field;
    /// Size of the common output header.
    pub const HEADER_SIZE: usize = 16;
    /// `status` (8 bits), see `crate::cmd_status`.
    pub const STATUS: Field = Field::dw(0x0, 31, 24);
    /// `syndrome` (32 bits): firmware-specific detail of a failure.
    pub const SYNDROME: Field = Field::bytes(0x4, 4);
}
