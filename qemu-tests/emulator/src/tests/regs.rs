//! Init segment registers, MMIO routing, untrapped polling.

use std::sync::{Arc, Mutex};

use firmware_interface::init_seg::{self as is, health};

use super::{H, TestMem, msg};
use crate::{BarMemory, Device, DeviceError, Profile};
use firmware_interface::{cmd, opcode as op};

#[test]
fn init_segment_reports_profile() {
    let p = Profile {
        fw_rev: (14, 32, 1010),
        ..Profile::default()
    };
    let mut h = H::raw(p);
    assert_eq!(h.rd32(is::FW_REV), 32 << 16 | 14);
    assert_eq!(h.rd32(is::CMDIF_REV_FW_SUB), 5 << 16 | 1010);
    let l = h.rd32(is::CMDQ_ADDR_L_SZ);
    assert_eq!((l >> 4) & 0xf, 5, "log_cmdq_size");
    assert_eq!(l & 0xf, 6, "log_cmdq_stride");
    assert_eq!((l >> 8) & 7, 0, "nic_interface");
    assert_ne!(h.rd32(is::HEALTH + health::FW_VER), health::FW_VER_DEAD);
    let mut synd = [0xffu8];
    h.dev.mmio_read(is::HEALTH + health::SYND, &mut synd);
    assert_eq!(synd[0], 0);
}

#[test]
fn initializing_clears_after_the_configured_reads() {
    let p = Profile {
        init_delay_reads: 3,
        ..Profile::default()
    };
    let mut h = H::raw(p);
    let reads: Vec<bool> = (0..5)
        .map(|_| h.rd32(is::INITIALIZING) & is::INITIALIZING_BIT != 0)
        .collect();
    assert_eq!(reads, [true, true, true, false, false]);
}

#[test]
fn never_ready_keeps_initializing_set_and_ignores_commands() {
    let mut h = H::raw(Profile::default());
    h.dev.faults().never_ready = true;
    h.set_cmdq();
    for _ in 0..50 {
        assert_ne!(h.rd32(is::INITIALIZING) & is::INITIALIZING_BIT, 0);
    }
    let b = h.build(0, &msg(op::NOP, 0, 16), 16);
    h.post(&b);
    assert!(
        h.result(&b).hw_owned,
        "a command was executed while initializing"
    );
    assert_eq!(
        h.dev.errors(),
        &[DeviceError::CmdWhileInitializing { value: 1 }]
    );
}

#[test]
fn health_counter_advances_on_every_read() {
    let mut h = H::raw(Profile::default());
    let a = h.rd32(is::HEALTH_COUNTER);
    let b = h.rd32(is::HEALTH_COUNTER);
    let c = h.rd32(is::HEALTH_COUNTER);
    assert!(b != a && c != b, "{a} {b} {c}");
    assert_eq!(b & !is::HEALTH_COUNTER_MASK, 0);
}

#[test]
fn internal_timer_runs() {
    let mut h = H::raw(Profile::default());
    let t = |h: &mut H| {
        let hi = h.rd32(is::INTERNAL_TIMER_H);
        let lo = h.rd32(is::INTERNAL_TIMER_L);
        u64::from(hi) << 32 | u64::from(lo)
    };
    let a = t(&mut h);
    std::thread::sleep(std::time::Duration::from_millis(2));
    let b = t(&mut h);
    assert!(b > a + 1_000_000, "{a} {b}");
}

#[test]
fn cmdq_address_latch_ignores_low_bits_and_keeps_high_half() {
    let mut h = H::raw(Profile::default());
    h.wr32(is::CMDQ_ADDR_H, 0x1);
    h.wr32(is::CMDQ_ADDR_L_SZ, 0x2345_6fff & !0x700);
    let l = h.rd32(is::CMDQ_ADDR_L_SZ);
    assert_eq!(l & 0xffff_f000, 0x2345_6000);
    assert_eq!(
        l & 0xff,
        0x56,
        "size/stride bits must read back, not what was written"
    );
    assert_eq!(h.dev.regs.cmdq, Some(0x1_2345_6000));
    assert_eq!(h.rd32(is::CMDQ_ADDR_H), 1);
    // nic_interface = DISABLED (fast teardown) reads back.
    h.wr32(is::CMDQ_ADDR_L_SZ, 0x2345_6000 | 1 << 8);
    assert_eq!((h.rd32(is::CMDQ_ADDR_L_SZ) >> 8) & 7, 1);
}

#[test]
fn doorbell_before_cmdq_is_recorded() {
    let mut h = H::raw(Profile::default());
    h.wait_ready();
    h.wr32(is::CMD_DBELL, 1);
    assert_eq!(h.dev.errors(), &[DeviceError::CmdqNotSet]);
    assert!(h.dev.command_log().is_empty());
}

#[test]
fn read_only_registers_and_bad_sizes_are_recorded() {
    let mut h = H::raw(Profile::default());
    h.wr32(is::FW_REV, 0xdead);
    h.dev.mmio_write(is::CMD_DBELL, &[1, 2]);
    h.dev.mmio_write(0x3000 + 2, &[0; 4]);
    h.dev.mmio_write(h.dev.bar.len() - 4, &[0; 8]);
    assert_eq!(
        h.dev.errors(),
        &[
            DeviceError::ReadOnlyRegister {
                offset: is::FW_REV,
                value: 0xdead
            },
            DeviceError::BadMmio {
                offset: is::CMD_DBELL,
                len: 2
            },
            DeviceError::BadMmio {
                offset: 0x3002,
                len: 4
            },
            DeviceError::BadMmio {
                offset: (32 << 20) - 4,
                len: 8
            },
        ]
    );
    assert_eq!(h.rd32(is::FW_REV), 35 << 16 | 16, "fw_rev must not change");
}

#[test]
fn doorbell_bits_beyond_the_queue_are_recorded() {
    let mut h = H::with(Profile {
        log_cmdq_size: 2,
        ..Profile::default()
    });
    h.wr32(is::CMD_DBELL, 1 << 7);
    assert_eq!(
        h.dev.errors(),
        &[DeviceError::BadDoorbell {
            offset: is::CMD_DBELL,
            value: 1 << 7
        }]
    );
}

#[test]
fn out_of_range_reads_give_all_ones() {
    let mut h = H::raw(Profile::default());
    let mut b = [0u8; 4];
    h.dev.mmio_read((32 << 20) - 2, &mut b);
    assert_eq!(b, [0, 0, 0xff, 0xff]);
}

/// A BAR in shared memory: the "driver" writes it directly, the device polls.
#[derive(Clone)]
struct SharedBar(Arc<Mutex<Vec<u8>>>);

impl BarMemory for SharedBar {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn read(&self, off: usize, buf: &mut [u8]) {
        let v = self.0.lock().unwrap();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = v.get(off + i).copied().unwrap_or(0xff);
        }
    }
    fn write(&mut self, off: usize, data: &[u8]) {
        let mut v = self.0.lock().unwrap();
        for (i, b) in data.iter().enumerate() {
            if let Some(d) = v.get_mut(off + i) {
                *d = *b;
            }
        }
    }
}

#[test]
fn untrapped_bar_works_by_polling() {
    let mem = TestMem::new();
    let shared = SharedBar(Arc::new(Mutex::new(vec![0; 1 << 20])));
    let mut view = shared.clone();
    let dev = Device::with_bar(
        Profile {
            bar_size: 1 << 20,
            ..Profile::default()
        },
        mem.clone(),
        Box::new(shared),
    );
    let mut h = H {
        dev,
        mem: mem.clone(),
        cmdq: 0,
        token: 0,
        pools: Default::default(),
    };
    let rd = |v: &SharedBar, off: usize| {
        let mut b = [0u8; 4];
        v.read(off, &mut b);
        u32::from_be_bytes(b)
    };
    // Registers are in the shared BAR from reset on.
    assert_eq!(rd(&view, is::CMDIF_REV_FW_SUB) >> 16, 5);
    assert_ne!(rd(&view, is::INITIALIZING) & is::INITIALIZING_BIT, 0);
    let c0 = rd(&view, is::HEALTH_COUNTER);
    // The driver writes the queue address straight into the BAR.
    let q = mem.alloc(4096, 4096);
    view.write(is::CMDQ_ADDR_H, &((q >> 32) as u32).to_be_bytes());
    view.write(is::CMDQ_ADDR_L_SZ, &(q as u32).to_be_bytes());
    assert!(h.dev.poll(), "the address write is work");
    h.dev.poll();
    h.dev.poll();
    assert_eq!(rd(&view, is::INITIALIZING) & is::INITIALIZING_BIT, 0);
    assert_ne!(
        rd(&view, is::HEALTH_COUNTER),
        c0,
        "heartbeat advances with polls"
    );
    assert_eq!(rd(&view, is::CMDQ_ADDR_L_SZ) & 0xff, 0x56);
    h.cmdq = q;
    // A command: entry in memory, doorbell word in the BAR, then poll.
    let b = h.build(0, &msg(op::NOP, 0, 16), 16);
    mem.wr(h.entry_addr(0), &b.entry);
    view.write(is::CMD_DBELL, &1u32.to_be_bytes());
    assert!(h.result(&b).hw_owned);
    assert!(h.dev.poll());
    let r = h.result(&b);
    assert!(!r.hw_owned);
    r.expect(0, 0);
    assert_eq!(rd(&view, is::CMD_DBELL), 0, "doorbell word consumed");
    assert!(!h.dev.poll(), "nothing left to do");
    // Scribbling over a read-only register is undone by the next poll.
    view.write(is::FW_REV, &[0; 4]);
    h.dev.poll();
    assert_ne!(rd(&view, is::FW_REV), 0);
    let _ = cmd::ENTRY_SIZE;
}
