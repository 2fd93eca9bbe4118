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
        ..crate::connectx::tests::quiet()
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
        ..crate::connectx::tests::quiet()
    };
    let mut h = H::raw(p);
    let reads: Vec<bool> = (0..5)
        .map(|_| h.rd32(is::INITIALIZING) & is::INITIALIZING_BIT != 0)
        .collect();
    assert_eq!(reads, [true, true, true, false, false]);
}

#[test]
fn never_ready_keeps_initializing_set_and_ignores_commands() {
    let mut h = H::raw(crate::connectx::tests::quiet());
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
    let mut h = H::raw(crate::connectx::tests::quiet());
    let a = h.rd32(is::HEALTH_COUNTER);
    let b = h.rd32(is::HEALTH_COUNTER);
    let c = h.rd32(is::HEALTH_COUNTER);
    assert!(b != a && c != b, "{a} {b} {c}");
    assert_eq!(b & !is::HEALTH_COUNTER_MASK, 0);
}

#[test]
fn internal_timer_runs() {
    let mut h = H::raw(crate::connectx::tests::quiet());
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
    let mut h = H::raw(crate::connectx::tests::quiet());
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
    let mut h = H::raw(crate::connectx::tests::quiet());
    h.wait_ready();
    h.wr32(is::CMD_DBELL, 1);
    assert_eq!(h.dev.errors(), &[DeviceError::CmdqNotSet]);
    assert!(h.dev.command_log().is_empty());
}

#[test]
fn read_only_registers_and_bad_sizes_are_recorded() {
    let mut h = H::raw(crate::connectx::tests::quiet());
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
        ..crate::connectx::tests::quiet()
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
    let mut h = H::raw(crate::connectx::tests::quiet());
    let mut b = [0u8; 4];
    h.dev.mmio_read((32 << 20) - 2, &mut b);
    assert_eq!(b, [0, 0, 0xff, 0xff]);
}

/// A BAR in shared memory: the "driver" writes it directly ([`Shared::drv_wr`]), the device
/// polls. Device writes are logged; a hook can land driver stores right after the device
/// reads a given word (a race at an exact point of a poll).
#[derive(Clone, Default)]
struct Shared {
    mem: Arc<Mutex<Vec<u8>>>,
    /// Word offsets the device wrote with `write` (not `swap32`).
    dev_writes: Arc<Mutex<Vec<usize>>>,
    /// After the device's next 4-byte read at `.0`: the driver stores `.1` (BE32 words).
    hook: Arc<Mutex<Hook>>,
}

/// Driver stores `.1` (offset, BE32 value) to land right after the device reads `.0`.
type Hook = Option<(usize, Vec<(usize, u32)>)>;

impl Shared {
    fn new(len: usize) -> Shared {
        Shared {
            mem: Arc::new(Mutex::new(vec![0; len])),
            ..Shared::default()
        }
    }
    fn drv_wr(&self, off: usize, v: u32) {
        self.mem.lock().unwrap()[off..off + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn drv_rd(&self, off: usize) -> u32 {
        let m = self.mem.lock().unwrap();
        u32::from_be_bytes([m[off], m[off + 1], m[off + 2], m[off + 3]])
    }
}

impl BarMemory for Shared {
    fn len(&self) -> usize {
        self.mem.lock().unwrap().len()
    }
    fn untrapped(&self) -> bool {
        true
    }
    fn read(&self, off: usize, buf: &mut [u8]) {
        {
            let v = self.mem.lock().unwrap();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = v.get(off + i).copied().unwrap_or(0xff);
            }
        }
        let mut hook = self.hook.lock().unwrap();
        if buf.len() == 4 && hook.as_ref().is_some_and(|(at, _)| *at == off) {
            for (o, v) in hook.take().unwrap().1 {
                self.drv_wr(o, v);
            }
        }
    }
    fn write(&mut self, off: usize, data: &[u8]) {
        self.dev_writes.lock().unwrap().push(off & !3);
        let mut v = self.mem.lock().unwrap();
        for (i, b) in data.iter().enumerate() {
            if let Some(d) = v.get_mut(off + i) {
                *d = *b;
            }
        }
    }
    fn compare_exchange32(&mut self, off: usize, current: [u8; 4], new: [u8; 4]) -> bool {
        // one lock: atomic against `drv_wr`
        let mut v = self.mem.lock().unwrap();
        if v[off..off + 4] != current {
            return false;
        }
        v[off..off + 4].copy_from_slice(&new);
        true
    }
    fn swap32(&mut self, off: usize, new: [u8; 4]) -> [u8; 4] {
        // one lock: atomic against `drv_wr`
        let mut v = self.mem.lock().unwrap();
        let mut old = [0u8; 4];
        old.copy_from_slice(&v[off..off + 4]);
        v[off..off + 4].copy_from_slice(&new);
        old
    }
}

/// A harness over an untrapped BAR (not ready yet, no command queue).
fn untrapped() -> (H, Shared) {
    let mem = TestMem::new();
    let shared = Shared::new(1 << 20);
    let dev = Device::with_bar(
        Profile {
            bar_size: 1 << 20,
            ..crate::connectx::tests::quiet()
        },
        mem.clone(),
        Box::new(shared.clone()),
    );
    let h = H {
        dev,
        mem,
        cmdq: 0,
        token: 0,
        issi: 1,
        pools: Default::default(),
    };
    (h, shared)
}

#[test]
fn untrapped_bar_works_by_polling() {
    let (mut h, view) = untrapped();
    let mem = h.mem.clone();
    let rd = |v: &Shared, off: usize| v.drv_rd(off);
    // Registers are in the shared BAR from reset on.
    assert_eq!(rd(&view, is::CMDIF_REV_FW_SUB) >> 16, 5);
    assert_ne!(rd(&view, is::INITIALIZING) & is::INITIALIZING_BIT, 0);
    assert_eq!(rd(&view, is::CMDQ_ADDR_L_SZ) & 0xff, 0x56, "queue geometry");
    let c0 = rd(&view, is::HEALTH_COUNTER);
    // The driver writes the queue address straight into the BAR.
    let q = mem.alloc(4096, 4096);
    view.drv_wr(is::CMDQ_ADDR_H, (q >> 32) as u32);
    view.drv_wr(is::CMDQ_ADDR_L_SZ, q as u32);
    assert!(h.dev.poll(), "the address write is work");
    h.dev.poll();
    h.dev.poll();
    assert_eq!(rd(&view, is::INITIALIZING) & is::INITIALIZING_BIT, 0);
    assert_ne!(
        rd(&view, is::HEALTH_COUNTER),
        c0,
        "heartbeat advances with polls"
    );
    // The word shows the geometry again: the next driver instance reads it there.
    assert_eq!(rd(&view, is::CMDQ_ADDR_L_SZ), q as u32 | 0x56);
    h.cmdq = q;
    // A command: entry in memory, doorbell word in the BAR, then poll.
    let b = h.build(0, &msg(op::NOP, 0, 16), 16);
    mem.wr(h.entry_addr(0), &b.entry);
    view.drv_wr(is::CMD_DBELL, 1);
    assert!(h.result(&b).hw_owned);
    assert!(h.dev.poll());
    let r = h.result(&b);
    assert!(!r.hw_owned);
    r.expect(0, 0);
    assert_eq!(rd(&view, is::CMD_DBELL), 0, "doorbell word consumed");
    // The same doorbell value again is a second command.
    mem.wr(h.entry_addr(0), &b.entry);
    view.drv_wr(is::CMD_DBELL, 1);
    assert!(h.dev.poll());
    assert!(!h.result(&b).hw_owned);
    assert_eq!(h.dev.command_log().len(), 2);
    // (a poll that reads the timer is no work)
    h.dev.poll();
    assert!(!h.dev.poll(), "nothing left to do");
    // Scribbling over a read-only register is undone by the next poll, and recorded.
    view.drv_wr(is::FW_REV, 0);
    h.dev.poll();
    assert_ne!(rd(&view, is::FW_REV), 0);
    assert_eq!(
        h.dev.errors(),
        &[DeviceError::ReadOnlyRegister {
            offset: is::FW_REV,
            value: 0
        }]
    );
    let _ = cmd::ENTRY_SIZE;
}

#[test]
fn untrapped_polls_write_no_driver_owned_word() {
    let (mut h, view) = untrapped();
    let q = h.mem.alloc(4096, 4096);
    view.dev_writes.lock().unwrap().clear();
    view.drv_wr(is::CMDQ_ADDR_H, (q >> 32) as u32);
    view.drv_wr(is::CMDQ_ADDR_L_SZ, q as u32);
    for _ in 0..20 {
        h.dev.poll();
    }
    h.cmdq = q;
    let b = h.build(0, &msg(op::NOP, 0, 16), 16);
    h.mem.wr(h.entry_addr(0), &b.entry);
    view.drv_wr(is::CMD_DBELL, 1);
    for _ in 0..5 {
        h.dev.poll();
    }
    h.result(&b).expect(0, 0);
    let w = view.dev_writes.lock().unwrap().clone();
    for reg in [is::CMDQ_ADDR_H, is::CMDQ_ADDR_L_SZ, is::CMD_DBELL] {
        assert!(!w.contains(&reg), "device wrote {reg:#x}: {w:x?}");
    }
    // Device-owned words are written when they change: the heartbeat every poll, the
    // static ones never.
    assert!(w.contains(&is::HEALTH_COUNTER));
    assert!(!w.contains(&is::FW_REV), "{w:x?}");
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
}

/// Two command rings between two polls of an untrapped BAR leave only the second in the
/// doorbell word (a driver rings its page slot while an ordinary command waits, before the
/// device polled): the first command still runs, because its entry is hardware-owned. A ring
/// that arrives after its command ran that way is not a ring for a software-owned entry.
#[test]
fn untrapped_rings_overwritten_before_a_poll_are_not_lost() {
    let (mut h, view) = untrapped();
    let q = h.mem.alloc(4096, 4096);
    view.drv_wr(is::CMDQ_ADDR_H, (q >> 32) as u32);
    view.drv_wr(is::CMDQ_ADDR_L_SZ, q as u32);
    for _ in 0..5 {
        h.dev.poll();
    }
    h.cmdq = q;
    let a = h.build(0, &msg(op::NOP, 0, 16), 16);
    let b = h.build(1, &msg(op::NOP, 0, 16), 16);
    h.mem.wr(h.entry_addr(0), &a.entry);
    view.drv_wr(is::CMD_DBELL, 1);
    h.mem.wr(h.entry_addr(1), &b.entry);
    view.drv_wr(is::CMD_DBELL, 1 << 1);
    assert!(h.dev.poll());
    h.result(&a).expect(0, 0);
    h.result(&b).expect(0, 0);
    let slots: Vec<u8> = h.dev.command_log().iter().map(|c| c.slot).collect();
    assert_eq!(slots, [0, 1], "the lost ring first, as it was rung first");
    // Slot 0 handed over, slot 1 rung before slot 0's ring reached the word (two driver
    // threads): slot 0 runs with slot 1's ring, and its own ring is then no error.
    h.mem.wr(h.entry_addr(0), &a.entry);
    h.mem.wr(h.entry_addr(1), &b.entry);
    view.drv_wr(is::CMD_DBELL, 1 << 1);
    assert!(h.dev.poll());
    h.result(&a).expect(0, 0);
    h.result(&b).expect(0, 0);
    view.drv_wr(is::CMD_DBELL, 1);
    assert!(h.dev.poll());
    assert_eq!(h.dev.command_log().len(), 4);
    // The next command on slot 0 runs on its ring as usual; a ring for a software-owned
    // entry is recorded again.
    h.mem.wr(h.entry_addr(0), &a.entry);
    view.drv_wr(is::CMD_DBELL, 1);
    assert!(h.dev.poll());
    h.result(&a).expect(0, 0);
    assert_eq!(h.dev.command_log().len(), 5);
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
    view.drv_wr(is::CMD_DBELL, 1);
    h.dev.poll();
    assert_eq!(h.dev.errors(), &[DeviceError::CmdNotOwned { slot: 0 }]);
}

#[test]
fn untrapped_queue_address_written_mid_poll_is_latched_whole() {
    let (mut h, view) = untrapped();
    for _ in 0..10 {
        h.dev.poll();
    }
    // The queue is above 4 GiB: a device pairing the new low word with the old high word (0)
    // would fetch the entry from an unmapped address.
    let q = h.mem.alloc(4096, 4096);
    assert_eq!(q >> 32, 1);
    h.cmdq = q;
    let b = h.build(0, &msg(op::NOP, 0, 16), 16);
    h.mem.wr(h.entry_addr(0), &b.entry);
    // The driver writes high word, low word and doorbell right after the device read the
    // high word of the queue address, and then again right after it read the low word.
    for trigger in [is::CMDQ_ADDR_H, is::CMDQ_ADDR_L_SZ] {
        *view.hook.lock().unwrap() = Some((
            trigger,
            vec![
                (is::CMDQ_ADDR_H, (q >> 32) as u32),
                (is::CMDQ_ADDR_L_SZ, q as u32),
                (is::CMD_DBELL, 1),
            ],
        ));
        for _ in 0..3 {
            h.dev.poll();
        }
        assert!(view.hook.lock().unwrap().is_none(), "hook not reached");
        h.result(&b).expect(0, 0);
        assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
        h.mem.wr(h.entry_addr(0), &b.entry);
        // the next round starts from another queue address
        view.drv_wr(is::CMDQ_ADDR_H, 0);
        view.drv_wr(is::CMDQ_ADDR_L_SZ, 0x10_0000);
        h.dev.poll();
    }
    assert_eq!(h.dev.command_log().len(), 2);
}

#[test]
fn untrapped_geometry_is_shown_again_without_erasing_a_newer_store() {
    let (mut h, view) = untrapped();
    let (q1, q2) = (h.mem.alloc(4096, 4096), h.mem.alloc(4096, 4096));
    view.drv_wr(is::CMDQ_ADDR_H, (q1 >> 32) as u32);
    view.drv_wr(is::CMDQ_ADDR_L_SZ, q1 as u32);
    // The driver stores the next low word right after the device read the first one: the
    // device's compare-and-swap of the geometry bits must not erase it ...
    *view.hook.lock().unwrap() = Some((is::CMDQ_ADDR_L_SZ, vec![(is::CMDQ_ADDR_L_SZ, q2 as u32)]));
    h.dev.poll();
    assert_eq!(view.drv_rd(is::CMDQ_ADDR_L_SZ), q2 as u32);
    assert_eq!(h.dev.regs.cmdq, Some(q1));
    // ... and the next poll latches it and shows the geometry.
    h.dev.poll();
    assert_eq!(h.dev.regs.cmdq, Some(q2));
    assert_eq!(view.drv_rd(is::CMDQ_ADDR_L_SZ), q2 as u32 | 0x56);
    h.dev.poll();
    assert_eq!(h.dev.regs.cmdq, Some(q2));
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
}

const CMD_EVENTS: u64 = 1 << 0x0a;

/// An untrapped device with an EQ of 4 entries taking command events; the EQ doorbell
/// offsets (arm, no arm) and `eqn << 24`.
fn untrapped_eq() -> (H, Shared, usize, usize, u32) {
    let (mut h, view) = untrapped();
    h.set_cmdq();
    h.wait_ready();
    h.init();
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(uar, 2, CMD_EVENTS);
    let page = uar as usize * 4096;
    (h, view, page + 0x40, page + 0x48, eqn << 24)
}

#[test]
fn untrapped_eq_rearm_with_an_unmoved_consumer_index_counts() {
    let (mut h, view, arm, _, e) = untrapped_eq();
    view.drv_wr(arm, e);
    h.dev.poll();
    assert_eq!(view.drv_rd(arm), 0, "doorbell consumed");
    assert!(h.dev.take_interrupts().is_empty());
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(h.dev.take_interrupts(), [0], "armed EQ fires");
    // The driver re-arms without consuming: the same value as before. An armed EQ with an
    // unconsumed EQE fires at once, as on hardware.
    view.drv_wr(arm, e);
    h.dev.poll();
    assert_eq!(
        h.dev.take_interrupts(),
        [0],
        "re-arm with the same value was missed"
    );
    // Consumed and re-armed (new value), then the same value once more: still armed, the
    // next event fires.
    view.drv_wr(arm, e | 1);
    h.dev.poll();
    view.drv_wr(arm, e | 1);
    h.dev.poll();
    assert!(h.dev.take_interrupts().is_empty());
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(h.dev.take_interrupts(), [0]);
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
}

#[test]
fn untrapped_eq_update_then_arm_between_two_polls_apply_in_order() {
    let (mut h, view, arm, noarm, e) = untrapped_eq();
    view.drv_wr(arm, e);
    h.dev.poll();
    for _ in 0..3 {
        h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    }
    h.dev.take_interrupts();
    // The driver consumed 2 (update without arming), then 3 (update and arm), both before
    // the device looked.
    view.drv_wr(noarm, e | 2);
    view.drv_wr(arm, e | 3);
    h.dev.poll();
    assert!(h.dev.errors().is_empty(), "{:?}", h.dev.errors());
    assert!(
        h.dev.take_interrupts().is_empty(),
        "everything was consumed"
    );
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(h.dev.take_interrupts(), [0], "the EQ was left armed");
    // Arm at 4, then update to 4 without arming: armed too.
    view.drv_wr(arm, e | 4);
    view.drv_wr(noarm, e | 4);
    h.dev.poll();
    h.cmd(&msg(op::NOP, 0, 16), 16).expect(0, 0);
    assert_eq!(h.dev.take_interrupts(), [0]);
    // A consumer index beyond the producer is still an error.
    view.drv_wr(noarm, e | 9);
    h.dev.poll();
    assert_eq!(
        h.dev.errors(),
        &[DeviceError::EqConsumerAhead {
            eqn: (e >> 24) as u8,
            ci: 9,
            pi: 5
        }]
    );
}
