//! Delivery statuses: malformed entries and mailbox chains are refused before execution.

use firmware_interface::cmd::{self, CmdLayout};
use firmware_interface::{delivery_status as ds, init_seg, op_mod, opcode as op};

use super::{Built, H, msg, set};
use crate::{DeviceError, Profile};

/// Posts `b` and returns its delivery status, asserting the command did not execute.
fn delivery(h: &mut H, b: &Built) -> u8 {
    let before = h.dev.live();
    h.post(b);
    let r = h.result(b);
    assert!(!r.hw_owned, "entry must be handed back");
    assert_eq!(
        h.dev.live(),
        before,
        "a refused command must have no effect"
    );
    assert_eq!(r.status, 0);
    r.delivery
}

fn entry_mut(b: &mut Built) -> CmdLayout {
    CmdLayout::from_bytes(&b.entry)
}

fn put(b: &mut Built, e: &CmdLayout) {
    b.entry = e.to_bytes();
}

/// ENABLE_HCA (16 bytes in) with a 4112-byte output chain: exercises both chains when paired
/// with a long input.
fn long_cmd(h: &mut H) -> Built {
    // QUERY_HCA_CAP: 16 in, 4112 out (8 output mailboxes); SET_HCA_CAP: 4112 in.
    let cur = {
        h.enable();
        h.query_cap(op_mod::CAP_GENERAL, false)
    };
    h.build(0, &H::set_cap_msg(op_mod::CAP_GENERAL, &cur), 4112)
}

#[test]
fn good_long_command_is_delivered() {
    let mut h = H::new();
    let b = long_cmd(&mut h);
    assert_eq!(delivery(&mut h, &b), ds::OK);
    assert_eq!(h.dev.command_log().last().unwrap().opcode, op::SET_HCA_CAP);
}

#[test]
fn wrong_descriptor_type() {
    let mut h = H::new();
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    let mut e = entry_mut(&mut b);
    e.type_ = 3;
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::CMD_DESCRIPTOR_TYPE_ERR);
    assert!(!h.dev.live().hca_enabled);
}

#[test]
fn reserved_entry_bytes_must_be_clear() {
    let mut h = H::new();
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    b.entry[1] = 1;
    assert_eq!(delivery(&mut h, &b), ds::RES_FLD_NOT_CLR);
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    b.entry[0x3e] = 1;
    assert_eq!(delivery(&mut h, &b), ds::RES_FLD_NOT_CLR);
}

#[test]
fn input_mailbox_token_mismatch() {
    let mut h = H::new();
    let b = long_cmd(&mut h);
    let last = *b.in_blocks.last().unwrap();
    h.mem.wr(last + cmd::MAILBOX_TOKEN_OFFSET as u64, &[0xee]);
    assert_eq!(delivery(&mut h, &b), ds::TOKEN_ERR);
    // The entry token differing from the chain is the same error.
    let mut b = long_cmd_again(&mut h);
    let mut e = entry_mut(&mut b);
    e.token ^= 0x80;
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::TOKEN_ERR);
}

fn long_cmd_again(h: &mut H) -> Built {
    let cur = h.query_cap(op_mod::CAP_GENERAL, false);
    h.build(0, &H::set_cap_msg(op_mod::CAP_GENERAL, &cur), 16)
}

#[test]
fn output_mailbox_token_mismatch() {
    let mut h = H::new();
    h.enable();
    let b = h.build(0, &msg(op::QUERY_HCA_CAP, 1, 16), 4112);
    h.mem
        .wr(b.out_blocks[3] + cmd::MAILBOX_TOKEN_OFFSET as u64, &[0xee]);
    assert_eq!(delivery(&mut h, &b), ds::TOKEN_ERR);
}

#[test]
fn bad_block_numbers() {
    let mut h = H::new();
    let b = long_cmd(&mut h);
    h.mem.wr(
        b.in_blocks[2] + cmd::MAILBOX_BLOCK_NUM_OFFSET as u64,
        &5u32.to_be_bytes(),
    );
    assert_eq!(delivery(&mut h, &b), ds::BAD_BLOCK_NUMBER);
    let b = h.build(0, &msg(op::QUERY_HCA_CAP, 1, 16), 4112);
    h.mem.wr(
        b.out_blocks[0] + cmd::MAILBOX_BLOCK_NUM_OFFSET as u64,
        &1u32.to_be_bytes(),
    );
    assert_eq!(delivery(&mut h, &b), ds::BAD_BLOCK_NUMBER);
}

#[test]
fn misaligned_mailbox_pointers() {
    let mut h = H::new();
    let mut b = long_cmd(&mut h);
    let mut e = entry_mut(&mut b);
    e.in_ptr.set(e.in_ptr.get() + 64);
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::IN_PTR_ALIGN);
    // A misaligned `next` deeper in the chain.
    let b = long_cmd_again(&mut h);
    let next = h
        .mem
        .rd(b.in_blocks[1] + cmd::MAILBOX_NEXT_OFFSET as u64, 8);
    let next = u64::from_be_bytes(next.try_into().unwrap()) + 512;
    h.mem.wr(
        b.in_blocks[1] + cmd::MAILBOX_NEXT_OFFSET as u64,
        &next.to_be_bytes(),
    );
    assert_eq!(delivery(&mut h, &b), ds::IN_PTR_ALIGN);
    let mut b = h.build(0, &msg(op::QUERY_HCA_CAP, 1, 16), 4112);
    let mut e = entry_mut(&mut b);
    e.out_ptr.set(e.out_ptr.get() + 16);
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::OUT_PTR_ALIGN);
}

#[test]
fn input_length_errors() {
    let mut h = H::new();
    // inlen below the 16-byte header.
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    let mut e = entry_mut(&mut b);
    e.inlen.set(8);
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::IN_LENGTH_ERR);
    // Absurd inlen.
    let mut e = entry_mut(&mut b);
    e.inlen.set(64 << 20);
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::IN_LENGTH_ERR);
    // A chain shorter than inlen.
    let b = long_cmd(&mut h);
    h.mem.wr(
        b.in_blocks[4] + cmd::MAILBOX_NEXT_OFFSET as u64,
        &0u64.to_be_bytes(),
    );
    assert_eq!(delivery(&mut h, &b), ds::IN_LENGTH_ERR);
    // inlen > 16 but no chain at all.
    let mut b = b;
    let mut e = entry_mut(&mut b);
    e.in_ptr.set(0);
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::IN_LENGTH_ERR);
}

#[test]
fn output_length_errors() {
    let mut h = H::new();
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    let mut e = entry_mut(&mut b);
    e.outlen.set(12);
    put(&mut b, &e);
    assert_eq!(delivery(&mut h, &b), ds::OUT_LENGTH_ERR);
    let b = h.build(0, &msg(op::NOP, 0, 16), 4112);
    h.mem.wr(
        b.out_blocks[6] + cmd::MAILBOX_NEXT_OFFSET as u64,
        &0u64.to_be_bytes(),
    );
    assert_eq!(delivery(&mut h, &b), ds::OUT_LENGTH_ERR);
}

#[test]
fn unmapped_mailbox_is_fw_error_and_a_recorded_dma_fault() {
    let mut h = H::new();
    let b = long_cmd(&mut h);
    h.mem.unmap(b.in_blocks[3], 1024);
    assert_eq!(delivery(&mut h, &b), ds::FW_ERR);
    assert!(
        h.dev
            .errors()
            .iter()
            .any(|e| matches!(e, DeviceError::Dma(f) if f.iova == b.in_blocks[3] && !f.write)),
        "{:?}",
        h.dev.errors()
    );
}

#[test]
fn unmapped_entry_is_recorded_and_nothing_runs() {
    let mut h = H::new();
    let b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    h.mem.wr(h.entry_addr(0), &b.entry);
    h.mem.unmap(h.cmdq, 4096);
    h.wr32(init_seg::CMD_DBELL, 1);
    assert!(matches!(h.dev.errors(), [DeviceError::Dma(f)] if f.iova == h.cmdq));
    assert!(!h.dev.live().hca_enabled);
}

#[test]
fn software_owned_entry_is_not_executed() {
    let mut h = H::new();
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    b.entry[0x3f] = 0;
    h.post(&b);
    assert_eq!(h.dev.errors(), &[DeviceError::CmdNotOwned { slot: 0 }]);
    assert!(!h.dev.live().hca_enabled);
    assert!(h.dev.command_log().is_empty());
}

#[test]
fn several_slots_in_one_doorbell() {
    let mut h = H::new();
    let a = h.build(3, &msg(op::NOP, 0, 16), 16);
    let b = h.build(30, &msg(op::ENABLE_HCA, 0, 16), 16);
    h.mem.wr(h.entry_addr(3), &a.entry);
    h.mem.wr(h.entry_addr(30), &b.entry);
    h.wr32(init_seg::CMD_DBELL, 1 << 3 | 1 << 30);
    h.result(&a).expect(0, 0);
    h.result(&b).expect(0, 0);
    let slots: Vec<u8> = h.dev.command_log().iter().map(|r| r.slot).collect();
    assert_eq!(slots, [3, 30]);
    assert!(h.dev.live().hca_enabled);
}

/// Fills in entry and mailbox signatures as a checksumming driver would.
fn sign(h: &mut H, b: &mut Built) {
    for a in &b.in_blocks {
        let mut blk = h.mem.rd(*a, cmd::MAILBOX_SIZE);
        blk[cmd::MAILBOX_CTRL_SIG_OFFSET] = 0;
        blk[cmd::MAILBOX_SIG_OFFSET] = 0;
        blk[cmd::MAILBOX_CTRL_SIG_OFFSET] = cmd::signature(&blk[cmd::MAILBOX_CTRL_SIG_RANGE]);
        blk[cmd::MAILBOX_SIG_OFFSET] = cmd::signature(&blk[cmd::MAILBOX_SIG_RANGE]);
        h.mem.wr(*a, &blk);
    }
    b.entry[cmd::SIG_OFFSET] = 0;
    b.entry[cmd::SIG_OFFSET] = cmd::signature(&b.entry);
}

#[test]
fn signatures_are_enforced_while_checksums_are_on() {
    let mut h = H::with(Profile {
        cmd_signatures: true,
        ..crate::connectx::tests::quiet()
    });
    // Unsigned entry.
    let b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    assert_eq!(delivery(&mut h, &b), ds::SIGNATURE_ERR);
    // Signed entry: delivered, and the completed entry carries a valid signature.
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    sign(&mut h, &mut b);
    h.post(&b);
    h.result(&b).expect(0, 0);
    let done = h.mem.rd(h.entry_addr(0), 64);
    assert_eq!(
        done.iter().fold(0u8, |a, x| a ^ x),
        0xff,
        "output entry signature"
    );
    // Signed entry, unsigned mailbox.
    let mut cur = h.query_cap_signed(false);
    set(
        &mut cur,
        firmware_interface::ctx::cmd_hca_cap::CMDIF_CHECKSUM,
        0,
    );
    let mut b = h.build(0, &H::set_cap_msg(op_mod::CAP_GENERAL, &cur), 16);
    b.entry[cmd::SIG_OFFSET] = 0;
    b.entry[cmd::SIG_OFFSET] = cmd::signature(&b.entry);
    assert_eq!(delivery(&mut h, &b), ds::SIGNATURE_ERR);
    // Fully signed SET_HCA_CAP turning checksums off ...
    let mut b = h.build(0, &H::set_cap_msg(op_mod::CAP_GENERAL, &cur), 16);
    sign(&mut h, &mut b);
    h.post(&b);
    h.result(&b).expect(0, 0);
    // ... after which nothing is checked.
    let b = h.build(0, &msg(op::NOP, 0, 16), 16);
    assert_eq!(delivery(&mut h, &b), ds::OK);
}

impl H {
    /// QUERY_HCA_CAP(general) with a signed entry (output mailboxes are checked for their
    /// device-written signatures too).
    fn query_cap_signed(&mut self, max: bool) -> Vec<u8> {
        let mut b = self.build(0, &msg(op::QUERY_HCA_CAP, u16::from(!max), 16), 4112);
        sign(self, &mut b);
        self.post(&b);
        let r = self.result(&b);
        r.expect(0, 0);
        for a in &b.out_blocks {
            let blk = self.mem.rd(*a, cmd::MAILBOX_SIZE);
            assert_eq!(
                blk.iter().fold(0u8, |a, x| a ^ x),
                0xff,
                "output block signature"
            );
        }
        r.out[16..].to_vec()
    }
}

#[test]
fn signatures_are_ignored_by_default() {
    let mut h = H::new();
    let mut b = h.build(0, &msg(op::ENABLE_HCA, 0, 16), 16);
    b.entry[cmd::SIG_OFFSET] = 0x5a;
    assert_eq!(delivery_ok(&mut h, &b), ds::OK);
}

fn delivery_ok(h: &mut H, b: &Built) -> u8 {
    h.post(b);
    h.result(b).delivery
}

#[test]
fn output_is_scattered_into_the_chain_and_headers_are_untouched() {
    let mut h = H::new();
    h.enable();
    let b = h.build(0, &msg(op::QUERY_HCA_CAP, 1, 16), 4112);
    let headers: Vec<Vec<u8>> = b.out_blocks.iter().map(|a| h.mem.rd(a + 512, 64)).collect();
    h.post(&b);
    let r = h.result(&b);
    r.expect(0, 0);
    let after: Vec<Vec<u8>> = b.out_blocks.iter().map(|a| h.mem.rd(a + 512, 64)).collect();
    assert_eq!(headers, after);
    let cap = &r.out[16..];
    assert_eq!(
        firmware_interface::ctx::cmd_hca_cap::LOG_MAX_QP.get(cap),
        10
    );
    assert_eq!(firmware_interface::ctx::cmd_hca_cap::NUM_PORTS.get(cap), 1);
}
