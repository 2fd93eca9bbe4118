//! CPU exceptions: an IDT whose 32 exception gates all run on an IST stack (so the red zone
//! of the interrupted code survives), a TSS for that stack, and a handler that reports the
//! exception on the console and exits with the panic status. This turns a crash into a
//! diagnosis instead of a triple fault.
//!
//! Gates 32..64 are for external interrupts ([`set_interrupt_gate`], used by `irq.rs`): they
//! run on a second IST stack, so an interrupt never writes below the interrupted code's
//! stack pointer either. Interrupts are enabled only while the CPU halts in a wait.

use core::ptr::addr_of;
use core::ptr::addr_of_mut;

use crate::io::{EXIT_PANIC, exit};
use crate::kprintln;

core::arch::global_asm!(include_str!("exceptions.S"));

unsafe extern "C" {
    /// Entry stubs of vectors 0..32 (exceptions.S).
    static uk_exc_table: [u64; 32];
}

/// The 64-bit TSS (only `ist1` is used).
#[repr(C, packed(4))]
struct Tss {
    reserved0: u32,
    rsp: [u64; 3],
    reserved1: u64,
    ist: [u64; 7],
    reserved2: u64,
    reserved3: u16,
    iomap_base: u16,
}

static mut TSS: Tss = Tss {
    reserved0: 0,
    rsp: [0; 3],
    reserved1: 0,
    ist: [0; 7],
    reserved2: 0,
    reserved3: 0,
    iomap_base: 104,
};

/// Gates in the IDT: the 32 exceptions and 32 external-interrupt vectors.
pub const GATES: usize = 64;

#[repr(C, align(16))]
struct Stack([u8; 32 << 10]);

static mut IST_STACK: Stack = Stack([0; 32 << 10]);

/// The interrupt handlers' stack (IST2): they push a few words only.
static mut IRQ_STACK: Stack = Stack([0; 32 << 10]);

/// null, code64 (0x08), data (0x10), TSS (0x18, two slots): the boot GDT's first three
/// descriptors, so the loaded segment registers stay valid.
static mut GDT: [u64; 5] = [0, 0x00AF_9A00_0000_FFFF, 0x00CF_9200_0000_FFFF, 0, 0];

#[repr(C, align(16))]
struct Idt([[u64; 2]; GATES]);

static mut IDT: Idt = Idt([[0; 2]; GATES]);

/// An interrupt gate (IF cleared on entry) to `handler` on IST `ist`.
fn gate(handler: u64, ist: u64) -> [u64; 2] {
    [
        (handler & 0xffff)
            | 0x08 << 16 // code selector
            | ist << 32
            | 0x8e << 40 // present, DPL 0, interrupt gate
            | ((handler >> 16) & 0xffff) << 48,
        handler >> 32,
    ]
}

/// Points gate `vector` (32..64) at `handler`, an entry stub that ends with `iretq`; it runs
/// on the interrupt stack (IST2) with interrupts off. Call with interrupts off.
pub fn set_interrupt_gate(vector: u8, handler: unsafe extern "C" fn()) {
    let v = usize::from(vector);
    assert!((32..GATES).contains(&v), "not an external-interrupt gate");
    // SAFETY: single CPU, interrupts off (the caller's contract): nothing reads the IDT entry
    // while it is written; the static lives forever.
    unsafe { (*addr_of_mut!(IDT)).0[v] = gate(handler as usize as u64, 2) };
}

#[repr(C, packed)]
struct Pointer {
    limit: u16,
    base: u64,
}

/// Installs the GDT with the TSS, the TSS and the IDT. Call once, early.
pub fn init() {
    // SAFETY: single-threaded, interrupts off, called once before anything can fault into
    // these tables; the statics live forever and are identity-mapped.
    unsafe {
        let stack_top = addr_of!(IST_STACK) as u64 + (32 << 10);
        (*addr_of_mut!(TSS)).ist[0] = stack_top;
        (*addr_of_mut!(TSS)).ist[1] = addr_of!(IRQ_STACK) as u64 + (32 << 10);
        let tss = addr_of!(TSS) as u64;
        let limit = (core::mem::size_of::<Tss>() - 1) as u64;
        let gdt = &mut *addr_of_mut!(GDT);
        gdt[3] = limit
            | (tss & 0xff_ffff) << 16
            | 0x89 << 40 // present, 64-bit TSS (available)
            | ((tss >> 24) & 0xff) << 56;
        gdt[4] = tss >> 32;
        let gp = Pointer {
            limit: (core::mem::size_of::<[u64; 5]>() - 1) as u16,
            base: addr_of!(GDT) as u64,
        };
        core::arch::asm!("lgdt [{}]", in(reg) &gp, options(readonly, nostack, preserves_flags));
        core::arch::asm!("ltr {0:x}", in(reg) 0x18u16, options(nostack, preserves_flags));
        let idt = &mut *addr_of_mut!(IDT);
        let table = &*addr_of!(uk_exc_table);
        for (v, g) in idt.0.iter_mut().take(32).enumerate() {
            *g = gate(table[v], 1);
        }
        let ip = Pointer {
            limit: (core::mem::size_of::<Idt>() - 1) as u16,
            base: addr_of!(IDT) as u64,
        };
        core::arch::asm!("lidt [{}]", in(reg) &ip, options(readonly, nostack, preserves_flags));
    }
}

const NAMES: [&str; 32] = [
    "#DE divide error",
    "#DB debug",
    "NMI",
    "#BP breakpoint",
    "#OF overflow",
    "#BR bound range",
    "#UD invalid opcode",
    "#NM device not available",
    "#DF double fault",
    "coprocessor segment overrun",
    "#TS invalid TSS",
    "#NP segment not present",
    "#SS stack fault",
    "#GP general protection",
    "#PF page fault",
    "reserved",
    "#MF x87 error",
    "#AC alignment check",
    "#MC machine check",
    "#XM SIMD error",
    "#VE virtualization",
    "#CP control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "#HV hypervisor injection",
    "#VC VMM communication",
    "#SX security",
    "reserved",
];

/// Called by the stubs: reports the exception and exits with the panic status.
#[unsafe(no_mangle)]
extern "C" fn uk_exception(vector: u64, error: u64, frame: *const u64) -> ! {
    // SAFETY: `frame` points at the CPU-pushed frame (rip, cs, rflags, rsp, ss) on the IST
    // stack.
    let (rip, rsp) = unsafe { (frame.read(), frame.add(3).read()) };
    let cr2: u64;
    // SAFETY: reading CR2 has no side effects.
    unsafe {
        core::arch::asm!("mov {}, cr2", out(reg) cr2, options(nomem, nostack, preserves_flags))
    };
    let name = NAMES.get(vector as usize).copied().unwrap_or("?");
    kprintln!(
        "EXCEPTION {vector} ({name}) error {error:#x} at rip {rip:#x} rsp {rsp:#x} cr2 {cr2:#x}"
    );
    exit(EXIT_PANIC)
}
