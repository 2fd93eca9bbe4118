//! The PVH boot information (`struct hvm_start_info`): the command line and the memory map.

use alloc::string::String;
use alloc::vec::Vec;

/// `hvm_start_info.magic`.
const PVH_MAGIC: u32 = 0x336e_c578;
/// E820 type of usable RAM.
pub const E820_RAM: u32 = 1;

/// One memory map entry.
#[derive(Clone, Copy, Debug)]
pub struct MemRange {
    /// First physical address.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// E820 type (1 = RAM).
    pub kind: u32,
}

/// What the loader told us.
#[derive(Debug)]
pub struct BootInfo {
    /// The kernel command line (QEMU's `-append`).
    pub cmdline: String,
    /// The memory map (empty if the loader gave none).
    pub memmap: Vec<MemRange>,
}

fn rd32(p: u64) -> u32 {
    // SAFETY: `p` is inside the identity-mapped low 4 GiB (checked by the callers) and
    // points into memory the loader filled; an unaligned read is fine on x86.
    unsafe { core::ptr::read_unaligned(p as *const u32) }
}

fn rd64(p: u64) -> u64 {
    // SAFETY: as in `rd32`.
    unsafe { core::ptr::read_unaligned(p as *const u64) }
}

const LOW_4G: u64 = 1 << 32;

/// Reads the start info at physical address `info` (EBX at entry).
pub fn read(info: u32) -> Result<BootInfo, &'static str> {
    let base = u64::from(info);
    if base == 0 || base + 56 > LOW_4G {
        return Err("no PVH start info");
    }
    if rd32(base) != PVH_MAGIC {
        return Err("bad PVH start info magic (not booted through PVH)");
    }
    let version = rd32(base + 4);
    let mut cmdline = String::new();
    let cl = rd64(base + 24);
    if cl != 0 && cl < LOW_4G - 4096 {
        for i in 0..4096 {
            // SAFETY: below 4 GiB (checked), inside the loader's command line (NUL-ended).
            let b = unsafe { core::ptr::read_volatile((cl + i) as *const u8) };
            if b == 0 {
                break;
            }
            cmdline.push(char::from(b));
        }
    }
    let mut memmap = Vec::new();
    if version >= 1 {
        let mm = rd64(base + 40);
        let n = rd32(base + 48).min(128);
        if mm != 0 && mm + u64::from(n) * 24 < LOW_4G {
            for i in 0..u64::from(n) {
                let e = mm + i * 24;
                memmap.push(MemRange {
                    addr: rd64(e),
                    size: rd64(e + 8),
                    kind: rd32(e + 16),
                });
            }
        }
    }
    Ok(BootInfo { cmdline, memmap })
}

/// `key=value` from a space-separated command line.
pub fn arg<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_ascii_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}
