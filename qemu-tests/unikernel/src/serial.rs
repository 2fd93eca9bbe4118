//! COM1 (16550) console, polled; `kprintln!` writes lines ending in CRLF.

use crate::io::{inb, outb};

const COM1: u16 = 0x3f8;

/// Programs COM1 for 115200 8N1, FIFOs on, no interrupts.
pub fn init() {
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x80);
    outb(COM1, 0x01);
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03);
    outb(COM1 + 2, 0xc7);
    outb(COM1 + 4, 0x03);
}

fn put(b: u8) {
    // Wait for the transmit holding register (bounded: a missing UART must not hang us).
    for _ in 0..100_000 {
        if inb(COM1 + 5) & 0x20 != 0 {
            break;
        }
    }
    outb(COM1, b);
}

/// The console as a `fmt::Write` sink.
pub struct Serial;

impl core::fmt::Write for Serial {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                put(b'\r');
            }
            put(b);
        }
        Ok(())
    }
}

/// Prints to the serial console.
#[macro_export]
macro_rules! kprint {
    ($($arg:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::serial::Serial, format_args!($($arg)*));
    }};
}

/// Prints a line to the serial console.
#[macro_export]
macro_rules! kprintln {
    () => { $crate::kprint!("\n") };
    ($($arg:tt)*) => {{
        $crate::kprint!($($arg)*);
        $crate::kprint!("\n");
    }};
}
