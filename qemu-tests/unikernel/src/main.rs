//! `rdma-unikernel`: the stack (mlx5 driver, verbs, connection manager) in a freestanding
//! x86_64 image, booted by QEMU through the PVH entry, driving the emulated NIC that
//! `nic-emud` runs behind an `ivshmem-plain` function (BAR2 = the NIC's BAR0).
//!
//! Built for the host target with the stable toolchain (no nightly, no extra targets):
//! `cargo build --release --manifest-path qemu-tests/unikernel/Cargo.toml`. Interrupts are
//! off except while the `irq` scenario halts in a wait (every gate runs on an IST stack,
//! since the host target's code uses the red zone); everything else polls: the UART, the
//! PIT (TSC calibration), the NIC.
//!
//! The kernel command line (`-append`) chooses the scenario: `scenario=hello` (console,
//! memory map, PCI), `bringup`, `loopback`, `server`, `fault` (a deliberate page fault: the
//! exception handler's report), `irq` (MSI-X: a completion wait halting until the
//! interrupt), `nvmf-target` (an NVMe-oF target serving a RAM namespace); see [`scenario`].
//! Results are printed on COM1 (`RESULT PASS <name>` / `RESULT FAIL <name>: <error>`) and
//! QEMU exits through `isa-debug-exit` with status 33 (pass), 35 (fail) or 37 (panic).
#![no_std]
#![no_main]

extern crate alloc;

mod bootinfo;
mod hal;
mod idt;
mod io;
mod irq;
mod mem;
mod paging;
mod pci;
mod scenario;
mod serial;

use core::ptr::addr_of_mut;

use linked_list_allocator::LockedHeap;

core::arch::global_asm!(include_str!("boot.S"));

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap::empty();

/// Size of the kernel heap (in .bss).
const HEAP_SIZE: usize = 16 << 20;

#[repr(C, align(4096))]
struct HeapMem([u8; HEAP_SIZE]);

static mut HEAP: HeapMem = HeapMem([0; HEAP_SIZE]);

unsafe extern "C" {
    /// End of the image (.bss included), from the linker script.
    static __image_end: u8;
}

/// Physical address of the first byte after the image.
pub fn image_end() -> u64 {
    core::ptr::addr_of!(__image_end) as u64
}

/// The entry from boot.S: `magic` is EAX at entry, `info` the PVH start info (EBX).
#[unsafe(no_mangle)]
pub extern "C" fn kmain(_magic: u32, info: u32) -> ! {
    let entry_tsc = io::rdtsc();
    serial::init();
    idt::init();
    // SAFETY: called once, before any allocation; HEAP is used by nothing else.
    unsafe {
        ALLOCATOR
            .lock()
            .init(addr_of_mut!(HEAP).cast::<u8>(), HEAP_SIZE);
    }
    let boot = match bootinfo::read(info) {
        Ok(b) => b,
        Err(e) => {
            kprintln!("RESULT FAIL boot: {e}");
            io::exit(io::EXIT_FAILURE);
        }
    };
    let name =
        alloc::string::String::from(bootinfo::arg(&boot.cmdline, "scenario").unwrap_or("hello"));
    let r = scenario::run(&boot, entry_tsc, &name);
    match r {
        Ok(()) => {
            kprintln!("RESULT PASS {name}");
            io::exit(io::EXIT_SUCCESS)
        }
        Err(e) => {
            kprintln!("RESULT FAIL {name}: {e}");
            io::exit(io::EXIT_FAILURE)
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    kprintln!("PANIC: {info}");
    io::exit(io::EXIT_PANIC)
}
