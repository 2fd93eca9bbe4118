//! Completion queues (spec §5.1): creation and destruction. The ring and the doorbell record
//! belong to the [`Cq`]; polling them is the verbs layer's fast path.

use firmware_interface::cmds::{create_cq_in, create_cq_out, destroy_cq_in};
use firmware_interface::ctx::cqc;
use firmware_interface::{cqe, dbr, opcode};
use nic_hal::{DmaBuf, Platform, RegisterIo};

use crate::device::{Device, cmd_in};
use crate::error::Error;
use crate::mem::{Shared, write_pas};

/// Size of one CQE (the driver creates CQs with 64-byte CQEs, `cqe_sz = 0`).
const CQE_SIZE: usize = cqe::SIZE;
/// Offset of `op_own` in a CQE.
const OP_OWN: usize = core::mem::offset_of!(cqe::Cqe64, op_own);

/// A completion queue: `2^log_size` 64-byte CQEs (each initialised with `op_own = 0xf0`) and a
/// 64-byte doorbell record (word 0: consumer index, word 1: arm). Dropped without
/// [`Device::destroy_cq`], its memory is leaked (the device may still write it).
#[derive(Debug)]
pub struct Cq {
    cqn: u32,
    log_size: u8,
    eqn: u32,
    uar: u32,
    buf: Shared,
    dbrec: Shared,
}

impl Cq {
    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// log2 of the number of CQEs.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Number of CQEs.
    pub fn entries(&self) -> u32 {
        1 << self.log_size
    }

    /// The EQ receiving this CQ's completion events.
    pub fn eqn(&self) -> u32 {
        self.eqn
    }

    /// UAR index whose page takes this CQ's arm doorbell (offset 0x20).
    pub fn uar(&self) -> u32 {
        self.uar
    }

    /// The CQE ring.
    pub fn buffer(&self) -> &DmaBuf {
        &self.buf
    }

    /// The doorbell record (`dbr::CQ_SET_CI`, `dbr::CQ_ARM`).
    pub fn doorbell_record(&self) -> &DmaBuf {
        &self.dbrec
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates a CQ of `2^log_size` 64-byte CQEs reporting completion events to EQ `eqn`, with
    /// its arm doorbell in the driver's UAR.
    pub fn create_cq(&self, log_size: u8, eqn: u32) -> Result<Cq, Error> {
        if log_size > self.caps.log_max_cq_sz || eqn > 0xff {
            return Err(Error::InvalidArgument);
        }
        let uar = self.driver_uar()?;
        let nent = 1usize << log_size;
        let bytes = (nent * CQE_SIZE).next_multiple_of(4096);
        let buf = Shared::new(&self.dma, bytes, 4096)?;
        for i in 0..nent {
            buf.write_u8(i * CQE_SIZE + OP_OWN, cqe::OP_OWN_INIT)?;
        }
        let dbrec = Shared::new(&self.dma, dbr::RECORD_SIZE, dbr::RECORD_SIZE)?;

        let npages = bytes / 4096;
        let mut inp = cmd_in(opcode::CREATE_CQ, 0, create_cq_in::SIZE + npages * 8);
        let ctx = create_cq_in::CQ_CONTEXT.byte_off();
        cqc::CQE_SZ.at(ctx).set(&mut inp, cqc::CQE_SZ_64);
        cqc::LOG_CQ_SIZE.at(ctx).set(&mut inp, log_size as u32);
        cqc::UAR_PAGE.at(ctx).set(&mut inp, uar);
        cqc::C_EQN_OR_APU_ELEMENT.at(ctx).set(&mut inp, eqn);
        cqc::LOG_PAGE_SIZE.at(ctx).set(&mut inp, 0);
        cqc::DBR_ADDR.at(ctx).set64(&mut inp, dbrec.iova());
        write_pas(&buf, &mut inp, create_cq_in::PAS.byte_off());

        let out = match self.cmd(&inp, 16) {
            Ok(out) => out,
            Err(e) => {
                if !crate::device_may_hold(&e) {
                    buf.release();
                    dbrec.release();
                }
                return Err(e);
            }
        };
        // On a bad number the CQ may exist in the device: its memory stays (leaked).
        let cqn = self.object_number(
            opcode::CREATE_CQ,
            &out,
            create_cq_out::CQN,
            self.caps.log_max_cq,
        )?;
        Ok(Cq {
            cqn,
            log_size,
            eqn,
            uar,
            buf,
            dbrec,
        })
    }

    /// Destroys a CQ and frees its memory. If the command fails the memory is leaked.
    pub fn destroy_cq(&self, cq: Cq) -> Result<(), Error> {
        let mut inp = cmd_in(opcode::DESTROY_CQ, 0, 16);
        destroy_cq_in::CQN.set(&mut inp, cq.cqn);
        self.cmd(&inp, 16)?;
        cq.buf.release();
        cq.dbrec.release();
        Ok(())
    }
}
