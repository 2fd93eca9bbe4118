//! The fault knobs, and garbage in never panics.

use firmware_interface::cmd::{self, CmdLayout};
use firmware_interface::{cmd_status as st, delivery_status as ds, init_seg, opcode as op};

use super::{H, World, msg};
use crate::FailCommand;

#[test]
fn fail_command_forces_status_without_effect() {
    let mut h = H::new();
    h.dev.faults().fail_command = Some(FailCommand {
        opcode: op::ENABLE_HCA,
        status: st::RES_BUSY,
        syndrome: 0x1234,
        times: Some(2),
    });
    for _ in 0..2 {
        h.cmd(&msg(op::ENABLE_HCA, 0, 16), 16)
            .expect(st::RES_BUSY, 0x1234);
        assert!(!h.dev.live().hca_enabled, "a forced failure has no effect");
    }
    // Other opcodes are untouched, and the knob ran out.
    h.ok(&msg(op::NOP, 0, 16), 16);
    h.enable();
    assert!(h.dev.faults().fail_command.is_none());
    // times: None fails forever.
    h.dev.faults().fail_command = Some(FailCommand {
        opcode: op::NOP,
        status: st::INTERNAL_ERR,
        syndrome: 9,
        times: None,
    });
    for _ in 0..3 {
        h.cmd(&msg(op::NOP, 0, 16), 16).expect(st::INTERNAL_ERR, 9);
    }
}

#[test]
fn fail_delivery_forces_a_delivery_status() {
    let mut h = H::new();
    h.dev.faults().fail_delivery = Some((op::ENABLE_HCA, ds::FW_ERR));
    let r = h.cmd(&msg(op::ENABLE_HCA, 0, 16), 16);
    assert_eq!(r.delivery, ds::FW_ERR);
    assert!(!h.dev.live().hca_enabled);
    let rec = h.dev.command_log().last().unwrap();
    assert_eq!((rec.opcode, rec.delivery), (op::ENABLE_HCA, ds::FW_ERR));
    h.ok(&msg(op::NOP, 0, 16), 16);
}

#[test]
fn stalled_commands_stay_hardware_owned() {
    let mut h = H::new();
    h.dev.faults().stall_commands = true;
    let b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    h.post(&b);
    assert!(h.result(&b).hw_owned);
    assert!(!h.dev.live().hca_enabled);
    assert!(h.dev.command_log().is_empty());
    // Released, the same doorbell completes it.
    h.dev.faults().stall_commands = false;
    h.wr32(init_seg::CMD_DBELL, 1);
    h.result(&b).expect(0, 0);
    assert!(h.dev.live().hca_enabled);
}

#[test]
fn output_hook_lets_the_device_lie() {
    let mut h = H::new();
    h.dev.faults().output_hook = Some(Box::new(|opcode, out| {
        if opcode == op::QUERY_ISSI {
            out[0x6f] = 0; // no ISSI supported at all
            out.truncate(20); // the device pads back to outlen
        }
    }));
    let o = h.ok(&msg(op::QUERY_ISSI, 0, 16), 112);
    assert_eq!(o.len(), 112);
    assert_eq!(
        firmware_interface::cmds::query_issi_out::SUPPORTED_ISSI_DW0.get(&o),
        0
    );
}

#[test]
fn corrupt_output_mailbox_breaks_the_chain_header() {
    let mut h = H::new();
    h.enable();
    h.dev.faults().corrupt_output_mailbox = Some(op::QUERY_HCA_CAP);
    let b = h.build(0, &msg(op::QUERY_HCA_CAP, 1, 16), 4112);
    h.post(&b);
    h.result(&b).expect(0, 0);
    let blk = h.mem.rd(b.out_blocks[0], cmd::MAILBOX_SIZE);
    let e = CmdLayout::read_from(&h.mem.rd(h.entry_addr(0), 64)).unwrap();
    assert_ne!(blk[cmd::MAILBOX_TOKEN_OFFSET], e.token);
    assert_ne!(super::be32(&blk[cmd::MAILBOX_BLOCK_NUM_OFFSET..]), 0);
    // The other blocks are intact.
    let blk1 = h.mem.rd(b.out_blocks[1], cmd::MAILBOX_SIZE);
    assert_eq!(blk1[cmd::MAILBOX_TOKEN_OFFSET], e.token);
}

/// xorshift64*: deterministic pseudo-random bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

#[test]
fn garbage_never_panics() {
    let mut w = World::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let opcodes: Vec<u16> = firmware_interface::opcode::ALL
        .iter()
        .map(|(o, _)| *o)
        .collect();
    let mailboxes: Vec<u64> = (0..4).map(|_| w.h.mem.alloc(1024, 1024)).collect();
    for round in 0..3000 {
        // A random input of plausible length for a random (mostly known) opcode, with random
        // bytes everywhere but a consistent chain half of the time.
        let opcode = if round % 7 == 0 {
            rng.next() as u16
        } else {
            opcodes[(rng.next() % opcodes.len() as u64) as usize]
        };
        let len = [16usize, 32, 48, 272, 512, 0x110 + 8 * 3][(rng.next() % 6) as usize];
        let mut m = vec![0u8; len];
        rng.fill(&mut m);
        if round % 3 != 0 {
            m[4..6].fill(0);
            m[2..4].fill(0);
        }
        firmware_interface::mbox_in::OPCODE.set(&mut m, u32::from(opcode));
        let mut b = w.h.build(
            (rng.next() % 32) as u8,
            &m,
            [16usize, 64, 464, 4112][(rng.next() % 4) as usize],
        );
        if round % 2 == 0 {
            rng.fill(&mut b.entry[..0x3f]);
            b.entry[0x3f] = 1;
            if round % 8 < 6 {
                // Mostly well-formed headers so the chains and handlers get exercised.
                b.entry[0] = cmd::XPORT_TYPE_PCI;
                b.entry[1..4].fill(0);
                b.entry[0x3e] = 0;
                let inlen = (rng.next() % 2000) as u32;
                b.entry[4..8].copy_from_slice(&inlen.to_be_bytes());
                let outlen = (rng.next() % 2000) as u32;
                b.entry[0x38..0x3c].copy_from_slice(&outlen.to_be_bytes());
                b.entry[0x30..0x38].copy_from_slice(&mailboxes[1].to_be_bytes());
            }
            for (i, a) in mailboxes.iter().enumerate() {
                let mut blk = vec![0u8; cmd::MAILBOX_SIZE];
                rng.fill(&mut blk);
                if round % 8 < 6 {
                    // A chain through the four blocks, usually with the right numbers.
                    let next = mailboxes.get(i + 1).copied().unwrap_or(0);
                    blk[cmd::MAILBOX_NEXT_OFFSET..][..8].copy_from_slice(&next.to_be_bytes());
                    blk[cmd::MAILBOX_BLOCK_NUM_OFFSET..][..4]
                        .copy_from_slice(&(i as u32).to_be_bytes());
                    blk[cmd::MAILBOX_TOKEN_OFFSET] = b.entry[0x3c];
                }
                w.h.mem.wr(*a, &blk);
            }
            if round % 4 != 1 {
                let a = mailboxes[(rng.next() % 4) as usize];
                b.entry[8..16].copy_from_slice(&a.to_be_bytes());
            }
        }
        w.h.post(&b);
        // Random doorbells and UAR writes.
        let off = (rng.next() % (64 << 12)) as usize & !3;
        let v = rng.next() as u32;
        w.h.wr32(off, v);
        let mut buf = [0u8; 8];
        w.h.dev
            .mmio_read((rng.next() % (40 << 20)) as usize, &mut buf);
        w.h.dev.poll();
    }
    let log = w.h.dev.command_log();
    let delivered = log.iter().filter(|r| r.delivery == 0).count();
    let executed = log
        .iter()
        .filter(|r| r.delivery == 0 && r.status != st::BAD_OP)
        .count();
    eprintln!(
        "fuzz: {} completions, {delivered} delivered, {executed} reached a handler",
        log.len()
    );
    assert!(
        delivered > 500 && executed > 200,
        "the fuzz does not reach the handlers"
    );
}
