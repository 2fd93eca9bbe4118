//! Identity mappings beyond the boot map (which covers 0..4 GiB with 2 MiB pages): for BARs
//! the firmware placed above 4 GiB.

use core::ptr::addr_of_mut;

unsafe extern "C" {
    /// The boot PML4 (boot.S).
    static mut boot_pml4: [u64; 512];
}

/// Page-table pages for extra mappings.
#[repr(C, align(4096))]
struct Pool([[u64; 512]; 8]);

static mut POOL: Pool = Pool([[0; 512]; 8]);
static mut POOL_USED: usize = 0;

const PRESENT_RW: u64 = 0x3;
const HUGE: u64 = 0x80;
/// Cache disable + write through, for device memory.
const PCD_PWT: u64 = 0x18;
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

fn new_table() -> Option<*mut u64> {
    // SAFETY: single-threaded kernel with interrupts off: no concurrent access to the pool.
    unsafe {
        let used = &mut *addr_of_mut!(POOL_USED);
        let pool = &mut *addr_of_mut!(POOL);
        if *used >= pool.0.len() {
            return None;
        }
        let t = pool.0[*used].as_mut_ptr();
        *used += 1;
        Some(t)
    }
}

/// The table an entry points to, creating it if the entry is empty. `None` if the entry is a
/// huge page or the pool is exhausted.
///
/// # Safety
///
/// `entry` points into a live page table.
unsafe fn next(entry: *mut u64) -> Option<*mut u64> {
    // SAFETY: per the contract.
    let e = unsafe { entry.read_volatile() };
    if e & 1 != 0 {
        if e & HUGE != 0 {
            return None;
        }
        return Some((e & ADDR_MASK) as *mut u64);
    }
    let t = new_table()?;
    // SAFETY: per the contract; the new table is zeroed pool memory, identity-mapped.
    unsafe { entry.write_volatile(t as u64 | PRESENT_RW) };
    Some(t)
}

/// Identity-maps `[addr, addr + size)` (rounded out to 2 MiB) as uncached device memory.
/// Ranges below 4 GiB are already mapped. Returns false if the page-table pool ran out.
pub fn identity_map(addr: u64, size: u64) -> bool {
    const TWO_MIB: u64 = 2 << 20;
    let start = addr & !(TWO_MIB - 1);
    let Some(end) = addr.checked_add(size) else {
        return false;
    };
    let mut va = start;
    while va < end {
        if va >= 1 << 32 {
            // SAFETY: the boot PML4 is live; all tables are identity-mapped below 4 GiB.
            let ok = unsafe {
                let pml4 = addr_of_mut!(boot_pml4).cast::<u64>();
                let pdpt = next(pml4.add(((va >> 39) & 511) as usize));
                let pd = pdpt.and_then(|p| next(p.add(((va >> 30) & 511) as usize)));
                match pd {
                    Some(pd) => {
                        pd.add(((va >> 21) & 511) as usize)
                            .write_volatile(va | PRESENT_RW | HUGE | PCD_PWT);
                        true
                    }
                    None => false,
                }
            };
            if !ok {
                return false;
            }
        }
        va += TWO_MIB;
    }
    // SAFETY: reloading CR3 with its own value flushes the TLB; nothing else changes.
    unsafe {
        core::arch::asm!("mov rax, cr3", "mov cr3, rax", out("rax") _, options(nostack));
    }
    true
}
