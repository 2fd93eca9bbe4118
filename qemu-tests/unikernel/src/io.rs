//! x86 port I/O.

/// Writes a byte to an I/O port.
pub fn outb(port: u16, v: u8) {
    // SAFETY: port I/O touches no memory; the ports used (COM1, PCI configuration, PIT,
    // isa-debug-exit) belong to this kernel alone.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a byte from an I/O port.
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: as in `outb`.
    unsafe {
        core::arch::asm!("in al, dx", in("dx") port, out("al") v, options(nomem, nostack, preserves_flags))
    };
    v
}

/// Writes a 32-bit word to an I/O port.
pub fn outl(port: u16, v: u32) {
    // SAFETY: as in `outb`.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") port, in("eax") v, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a 32-bit word from an I/O port.
pub fn inl(port: u16) -> u32 {
    let v: u32;
    // SAFETY: as in `outb`.
    unsafe {
        core::arch::asm!("in eax, dx", in("dx") port, out("eax") v, options(nomem, nostack, preserves_flags))
    };
    v
}

/// 64 random bits from RDRAND where the CPU has it (CPUID.1:ECX bit 30; retried a few
/// times, as the instruction may come back empty); `None` without it.
pub fn rdrand() -> Option<u64> {
    // CPUID leaf 1 exists on every x86-64 CPU and only reads identification bits.
    let ecx = core::arch::x86_64::__cpuid(1).ecx;
    if ecx & (1 << 30) == 0 {
        return None;
    }
    for _ in 0..10 {
        let v: u64;
        let ok: u8;
        // SAFETY: CPUID said the CPU has RDRAND; it writes a register and the carry flag
        // and touches no memory.
        unsafe {
            core::arch::asm!("rdrand {v}", "setc {ok}", v = out(reg) v, ok = out(reg_byte) ok,
                options(nomem, nostack))
        };
        if ok != 0 {
            return Some(v);
        }
    }
    None
}

/// The time stamp counter.
pub fn rdtsc() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: RDTSC reads a counter into EDX:EAX and touches no memory.
    unsafe {
        core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    u64::from(hi) << 32 | u64::from(lo)
}

/// QEMU's `isa-debug-exit` port (`-device isa-debug-exit,iobase=0xf4,iosize=0x04`).
const DEBUG_EXIT: u16 = 0xf4;

/// QEMU exit status 33: the scenario passed.
pub const EXIT_SUCCESS: u32 = 0x10;
/// QEMU exit status 35: the scenario failed (an error it reported).
pub const EXIT_FAILURE: u32 = 0x11;
/// QEMU exit status 37: a panic.
pub const EXIT_PANIC: u32 = 0x12;

/// Leaves QEMU with status `(code << 1) | 1`; halts if there is no isa-debug-exit device.
pub fn exit(code: u32) -> ! {
    outl(DEBUG_EXIT, code);
    loop {
        // SAFETY: interrupts are off for the kernel's whole life; HLT just stops the CPU.
        unsafe { core::arch::asm!("hlt", options(nomem, nostack)) };
    }
}
