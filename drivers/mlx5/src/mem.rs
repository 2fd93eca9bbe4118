//! DMA memory handed to the device.

use nic_hal::DmaBuf;

/// A DMA buffer the device may still use: dropping it leaks the memory (see
/// [`nic_hal::DeviceBuf`]).
pub(crate) use nic_hal::DeviceBuf as Shared;
pub(crate) use nic_hal::address_space;

/// Writes the BE64 address of each 4 KB page of `buf` into `out` from byte `at` (a PAS list,
/// `docs/mlx5.md#page-lists`). Returns `false` if `out` is too short.
pub(crate) fn write_pas(buf: &DmaBuf, out: &mut [u8], at: usize) -> bool {
    let pages = buf.len().div_ceil(4096);
    for i in 0..pages {
        let off = at + i * 8;
        let Some(dst) = out.get_mut(off..off + 8) else {
            return false;
        };
        dst.copy_from_slice(&(buf.iova() + (i as u64) * 4096).to_be_bytes());
    }
    true
}
