//! MSI-X on the local APIC: the NIC function's MSI-X table entries point at this CPU's
//! xAPIC with IDT vectors [`MSIX_VECTOR_BASE`].., an entry stub per vector counts the
//! delivery and signals end-of-interrupt, and [`LapicIrqs`] is the hal's
//! [`Interrupts`]: a waiter halts (`sti; hlt`) until an interrupt arrives, with the APIC
//! timer as its alarm clock for the timeout.
//!
//! Interrupts are enabled only inside [`LapicIrqs::wait`], between `sti` and `hlt` (the
//! instruction after `sti` runs before any interrupt is taken, so one that became pending
//! after the last check wakes the `hlt` instead of being missed). The 8259 PICs are masked:
//! the firmware leaves their timer on, and its vector would land on an exception gate.
//!
//! The xAPIC is at its reset address (physical 0xFEE0_0000, identity-mapped below 4 GiB).

use core::sync::atomic::{AtomicU64, Ordering};

use nic_hal::{Interrupts, IrqError, IrqWatch, Platform};

use crate::hal::TscClock;
use crate::io::{outb, rdtsc};
use crate::{idt, paging, pci};

/// IDT vector of MSI-X vector 0 (the others follow).
pub const MSIX_VECTOR_BASE: u8 = 48;
/// MSI-X vectors this kernel takes (gates 48..56).
pub const MAX_VECTORS: u16 = 8;
/// IDT vector of the APIC timer (the wait's alarm clock).
pub const TIMER_VECTOR: u8 = 56;
/// IDT vector of the APIC's spurious interrupt (low four bits all ones).
pub const SPURIOUS_VECTOR: u8 = 63;

/// The xAPIC's registers (physical = virtual).
const LAPIC: usize = 0xfee0_0000;
const LAPIC_ID: usize = 0x20;
const LAPIC_TPR: usize = 0x80;
const LAPIC_SVR: usize = 0xf0;
const LAPIC_LVT_TIMER: usize = 0x320;
const LAPIC_TIMER_INIT: usize = 0x380;
const LAPIC_TIMER_CURRENT: usize = 0x390;
const LAPIC_TIMER_DIVIDE: usize = 0x3e0;
/// LVT mask bit.
const LVT_MASKED: u32 = 1 << 16;
/// MSI-X capability ID.
const CAP_MSIX: u8 = 0x11;

/// Deliveries per MSI-X vector, then the APIC timer's (written by the entry stubs).
#[unsafe(no_mangle)]
static uk_irq_counts: [AtomicU64; MAX_VECTORS as usize + 1] =
    [const { AtomicU64::new(0) }; MAX_VECTORS as usize + 1];

// Entry stubs: count the delivery (one locked increment), write 0 to the xAPIC's EOI
// register (0xFEE000B0), return. They touch RAX only, saved on the interrupt stack, and no
// SSE state. The spurious vector takes no EOI.
core::arch::global_asm!(
    r#"
.section .text
.macro UK_IRQ_STUB name, slot
.global \name
\name:
    lock inc qword ptr [rip + uk_irq_counts + 8 * \slot]
    push rax
    mov eax, 0xfee000b0
    mov dword ptr [rax], 0
    pop rax
    iretq
.endm
UK_IRQ_STUB uk_irq_0, 0
UK_IRQ_STUB uk_irq_1, 1
UK_IRQ_STUB uk_irq_2, 2
UK_IRQ_STUB uk_irq_3, 3
UK_IRQ_STUB uk_irq_4, 4
UK_IRQ_STUB uk_irq_5, 5
UK_IRQ_STUB uk_irq_6, 6
UK_IRQ_STUB uk_irq_7, 7
UK_IRQ_STUB uk_irq_timer, 8
.global uk_irq_spurious
uk_irq_spurious:
    iretq
"#
);

unsafe extern "C" {
    fn uk_irq_0();
    fn uk_irq_1();
    fn uk_irq_2();
    fn uk_irq_3();
    fn uk_irq_4();
    fn uk_irq_5();
    fn uk_irq_6();
    fn uk_irq_7();
    fn uk_irq_timer();
    fn uk_irq_spurious();
}

fn lapic_read(reg: usize) -> u32 {
    // SAFETY: the xAPIC register page is identity-mapped device memory; a 32-bit aligned
    // read of one of its registers has no effect beyond the register's.
    unsafe { core::ptr::read_volatile((LAPIC + reg) as *const u32) }
}

fn lapic_write(reg: usize, v: u32) {
    // SAFETY: as in `lapic_read`; the registers written here are the ones this module owns.
    unsafe { core::ptr::write_volatile((LAPIC + reg) as *mut u32, v) }
}

/// The deliveries of MSI-X vector `v` so far.
pub fn count(v: u16) -> u64 {
    uk_irq_counts
        .get(usize::from(v))
        .map_or(0, |c| c.load(Ordering::Acquire))
}

/// The APIC timer's deliveries so far.
pub fn timer_count() -> u64 {
    uk_irq_counts[MAX_VECTORS as usize].load(Ordering::Acquire)
}

/// Masks the PICs, installs the gates, enables the xAPIC and measures its timer against the
/// TSC. Returns the APIC timer's ticks per millisecond. Call once, interrupts off.
pub fn init(clock: &TscClock) -> Result<u64, &'static str> {
    outb(0x21, 0xff);
    outb(0xa1, 0xff);
    let stubs: [unsafe extern "C" fn(); 8] = [
        uk_irq_0, uk_irq_1, uk_irq_2, uk_irq_3, uk_irq_4, uk_irq_5, uk_irq_6, uk_irq_7,
    ];
    for (i, s) in stubs.into_iter().enumerate() {
        idt::set_interrupt_gate(MSIX_VECTOR_BASE + i as u8, s);
    }
    idt::set_interrupt_gate(TIMER_VECTOR, uk_irq_timer);
    idt::set_interrupt_gate(SPURIOUS_VECTOR, uk_irq_spurious);
    lapic_write(LAPIC_TPR, 0);
    lapic_write(LAPIC_SVR, 0x100 | u32::from(SPURIOUS_VECTOR));
    // The timer, masked, counting down from the top at the bus clock (divide by 1) for 10 ms.
    lapic_write(LAPIC_TIMER_DIVIDE, 0b1011);
    lapic_write(LAPIC_LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    lapic_write(LAPIC_TIMER_INIT, u32::MAX);
    let t0 = rdtsc();
    let ten_ms = clock.hz() / 100;
    while rdtsc().wrapping_sub(t0) < ten_ms {
        core::hint::spin_loop();
    }
    let left = lapic_read(LAPIC_TIMER_CURRENT);
    lapic_write(LAPIC_TIMER_INIT, 0);
    let per_ms = u64::from(u32::MAX - left) / 10;
    if per_ms == 0 {
        return Err("the APIC timer does not count");
    }
    Ok(per_ms)
}

/// Points the MSI-X table of `f` at this CPU (IDT vectors [`MSIX_VECTOR_BASE`]..), unmasks
/// its entries and enables MSI-X (and bus mastering: a message is a memory write of the
/// function). Returns the number of vectors taken (at most [`MAX_VECTORS`]).
pub fn enable_msix(f: &pci::Function) -> Result<u16, &'static str> {
    // Capability list: status bit 4, pointer at 0x34.
    if (f.read(0x04) >> 16) & 0x10 == 0 {
        return Err("the function has no capability list");
    }
    let mut at = (f.read(0x34) & 0xfc) as u8;
    let mut hops = 0;
    while at != 0 && (f.read(at) & 0xff) as u8 != CAP_MSIX {
        at = ((f.read(at) >> 8) & 0xfc) as u8;
        hops += 1;
        if hops > 48 {
            return Err("the capability list loops");
        }
    }
    if at == 0 {
        return Err("the function has no MSI-X capability (use ivshmem-doorbell)");
    }
    let head = f.read(at);
    let table_size = ((head >> 16) & 0x7ff) as u16 + 1;
    let table = f.read(at + 4);
    let bir = (table & 7) as u8;
    let offset = u64::from(table & !7);
    let bar = pci::memory_bar(f, bir).ok_or("the MSI-X table's BAR is not assigned")?;
    let n = table_size.min(MAX_VECTORS);
    if offset + 16 * u64::from(table_size) > bar.size {
        return Err("the MSI-X table does not fit its BAR");
    }
    if bar.addr.checked_add(bar.size).is_none_or(|e| e > 1 << 32)
        && !paging::identity_map(bar.addr, bar.size)
    {
        return Err("cannot map the MSI-X table's BAR");
    }
    f.set_command(f.command() | 0x0006);
    let apic_id = lapic_read(LAPIC_ID) >> 24;
    for i in 0..u64::from(n) {
        let e = (bar.addr + offset + 16 * i) as *mut u32;
        // SAFETY: entry `i` (< table_size) lies inside the BAR (checked), which is
        // identity-mapped device memory no one else uses; each word is written with one
        // aligned volatile store, the vector control word (unmask) last.
        unsafe {
            e.write_volatile(0xfee0_0000 | apic_id << 12); // message address, this APIC
            e.add(1).write_volatile(0); // address high
            e.add(2)
                .write_volatile(u32::from(MSIX_VECTOR_BASE) + i as u32); // data: vector
            e.add(3).write_volatile(0); // vector control: unmasked
        }
    }
    // Message control (bits 16..32 of the capability's first dword): enable (15), function
    // mask (14) off. The low half (ID, next pointer) is read-only.
    f.write(at, (head & !(1 << 30)) | 1 << 31);
    if f.read(at) & (1 << 31) == 0 {
        return Err("MSI-X enable did not stick");
    }
    Ok(n)
}

/// The function's MSI-X vectors as the hal's [`Interrupts`]: counted by the entry stubs,
/// waited for by halting.
#[derive(Debug)]
pub struct LapicIrqs {
    vectors: u16,
    clock: TscClock,
    timer_per_ms: u64,
    /// TSC ticks spent halted in [`Interrupts::wait`].
    halted: AtomicU64,
    /// Halts in [`Interrupts::wait`].
    halts: AtomicU64,
}

impl LapicIrqs {
    /// `vectors` vectors (from [`enable_msix`]); `timer_per_ms` from [`init`].
    pub fn new(vectors: u16, clock: TscClock, timer_per_ms: u64) -> LapicIrqs {
        LapicIrqs {
            vectors: vectors.min(MAX_VECTORS),
            clock,
            timer_per_ms,
            halted: AtomicU64::new(0),
            halts: AtomicU64::new(0),
        }
    }

    /// TSC ticks spent halted in waits so far, and the number of halts.
    pub fn halted(&self) -> (u64, u64) {
        (
            self.halted.load(Ordering::Relaxed),
            self.halts.load(Ordering::Relaxed),
        )
    }
}

impl Interrupts for LapicIrqs {
    fn vectors(&self) -> u16 {
        self.vectors
    }

    fn enable(&self, vector: u16) -> Result<(), IrqError> {
        // Every entry was unmasked when MSI-X was enabled.
        if vector < self.vectors {
            Ok(())
        } else {
            Err(IrqError::NoSuchVector)
        }
    }

    fn count(&self, vector: u16) -> u64 {
        if vector < self.vectors {
            count(vector)
        } else {
            0
        }
    }

    fn wait(&self, watch: &[IrqWatch], timeout_ns: u64) -> Result<bool, IrqError> {
        if watch.iter().any(|w| w.vector >= self.vectors) {
            return Err(IrqError::NoSuchVector);
        }
        let deadline = self.clock.now_ns().saturating_add(timeout_ns);
        loop {
            // Interrupts are off here (the kernel's normal state): a delivery after this
            // check stays pending in the APIC until the `sti` below.
            if watch.iter().any(|w| count(w.vector) != w.seen) {
                return Ok(true);
            }
            let now = self.clock.now_ns();
            if now >= deadline {
                return Ok(false);
            }
            // The alarm: at most 100 ms per halt, so a long timeout is rechecked now and then.
            let ms = (deadline - now).div_ceil(1_000_000).min(100);
            let ticks = (ms * self.timer_per_ms).clamp(1, u64::from(u32::MAX)) as u32;
            lapic_write(LAPIC_LVT_TIMER, u32::from(TIMER_VECTOR)); // one-shot, unmasked
            lapic_write(LAPIC_TIMER_INIT, ticks);
            let t0 = rdtsc();
            // SAFETY: every external vector that can fire has a gate whose stub runs on its
            // own IST stack and returns with `iretq`; `sti; hlt` sleeps until the next
            // interrupt (one already pending wakes it at once), and `cli` restores the
            // kernel's interrupts-off state before anything else runs.
            unsafe { core::arch::asm!("sti", "hlt", "cli", options(nostack)) };
            self.halted
                .fetch_add(rdtsc().wrapping_sub(t0), Ordering::Relaxed);
            self.halts.fetch_add(1, Ordering::Relaxed);
            lapic_write(LAPIC_TIMER_INIT, 0);
            lapic_write(LAPIC_LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
        }
    }
}

/// The driver's platform with interrupts: the TSC clock and the NIC's MSI-X vectors.
#[derive(Clone, Copy, Debug)]
pub struct IrqPlatform {
    /// The clock.
    pub clock: TscClock,
    /// The vectors (one per image: leaked at set-up).
    pub irqs: &'static LapicIrqs,
}

impl Platform for IrqPlatform {
    fn relax(&self) {
        Platform::relax(&self.clock)
    }
    fn now_ns(&self) -> u64 {
        Platform::now_ns(&self.clock)
    }
    fn interrupts(&self) -> Option<&dyn Interrupts> {
        Some(self.irqs)
    }
}
