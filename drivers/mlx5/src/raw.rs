//! The driver's own objects and commands, beside the verbs provider (cargo feature `raw`,
//! off by default).
//!
//! Everything here has a [`verbs::Provider`] counterpart that programs should use instead:
//! [`RawDevice::create_qp`] + [`RawDevice::modify_qp`] are what `Provider::create_qp` and
//! `Provider::modify_qp` are built on, [`RawDevice::create_mkey`] is `Provider::reg_mr` without
//! the memory's owner, and so on. They exist for what the provider cannot express: tests of
//! the firmware commands themselves (one command, its exact input, its failure), and harnesses
//! that drive the device below the verbs model. The native types differ from the verbs ones
//! (a [`Transition`] names the firmware command, [`QpModify`] is the QP context's fields, an
//! [`Mkey`] does not hold its memory), and none of these calls keeps the provider's
//! bookkeeping (a QP moved with [`RawDevice::modify_qp`] is not in the state its verbs view
//! shows).
//!
//! ```
//! use mlx5::raw::{QpCreate, RawDevice, Transition, QpModify, QpState};
//! let bench = mlx5::fake::bench();
//! let dev = bench.probe().unwrap();
//! let cq = RawDevice::create_cq(&dev, 3, dev.driver_eqn().unwrap()).unwrap();
//! let mut qp = RawDevice::create_qp(&dev, &QpCreate {
//!     pd: dev.driver_pd().unwrap(),
//!     send_cqn: cq.cqn(),
//!     recv_cqn: cq.cqn(),
//!     ..QpCreate::default()
//! }).unwrap();
//! RawDevice::modify_qp(&dev, &mut qp, Transition::Rst2Init, &QpModify::default()).unwrap();
//! assert_eq!(RawDevice::query_qp(&dev, &qp).unwrap().state, QpState::Init);
//! RawDevice::destroy_qp(&dev, qp).unwrap();
//! RawDevice::destroy_cq(&dev, cq).unwrap();
//! ```

use alloc::vec::Vec;

use nic_hal::{Platform, RegisterIo};

use crate::{Cq, Device, Error, Qp, Srq};

pub use crate::mkey::{Mkey, MkeyAccess};
pub use crate::qp::{
    AddressPath, Mtu, QpAccess, QpCreate, QpModify, QpState, QueryQp, ServiceType, Transition,
};

/// The native object calls of a [`Device`] (see the [module](self) documentation).
pub trait RawDevice {
    /// CREATE_QP of a QP on the CQs `attr` names; it must be attached
    /// ([`attach_qp`](Self::attach_qp)) before it is used.
    fn create_qp(&self, attr: &QpCreate) -> Result<Qp, Error>;
    /// CREATE_QP of a QP receiving from `srq` (no receive queue of its own).
    fn create_qp_srq(&self, attr: &QpCreate, srq: &Srq) -> Result<Qp, Error>;
    /// Attaches a QP to the CQs it was created on, for the data path.
    fn attach_qp(&self, qp: &mut Qp, send_cq: &Cq, recv_cq: &Cq) -> Result<(), Error>;
    /// One state transition (the firmware command `transition` names) with `attr`.
    fn modify_qp(&self, qp: &mut Qp, transition: Transition, attr: &QpModify) -> Result<(), Error>;
    /// QUERY_QP.
    fn query_qp(&self, qp: &Qp) -> Result<QueryQp, Error>;
    /// DESTROY_QP.
    fn destroy_qp(&self, qp: Qp) -> Result<(), Error>;
    /// The QP's service type.
    fn qp_service(&self, qp: &Qp) -> ServiceType;
    /// The QP's state after its last successful transition.
    fn qp_state(&self, qp: &Qp) -> QpState;
    /// CREATE_MKEY: `len` bytes at `iova` in PD `pd` over the 4 KB `pages`.
    ///
    /// # Safety
    ///
    /// The pages are memory the caller owns, mapped for the device, and they stay allocated,
    /// mapped and given to nobody else until [`destroy_mkey`](Self::destroy_mkey) of the key
    /// returned `Ok` (forever if it never does).
    unsafe fn create_mkey(
        &self,
        pd: u32,
        iova: u64,
        len: u64,
        access: MkeyAccess,
        pages: &[u64],
    ) -> Result<Mkey, Error>;
    /// DESTROY_MKEY.
    fn destroy_mkey(&self, mkey: Mkey) -> Result<(), Error>;
    /// CREATE_CQ of `2^log_size` entries on EQ `eqn`.
    fn create_cq(&self, log_size: u8, eqn: u32) -> Result<Cq, Error>;
    /// DESTROY_CQ.
    fn destroy_cq(&self, cq: Cq) -> Result<(), Error>;
    /// ALLOC_PD.
    fn alloc_pd(&self) -> Result<u32, Error>;
    /// DEALLOC_PD.
    fn dealloc_pd(&self, pd: u32) -> Result<(), Error>;
    /// ALLOC_UAR.
    fn alloc_uar(&self) -> Result<u32, Error>;
    /// DEALLOC_UAR.
    fn dealloc_uar(&self, uar: u32) -> Result<(), Error>;
    /// Executes the command `input` (header included) and returns `out_len` bytes of output.
    fn exec(&self, input: &[u8], out_len: usize) -> Result<Vec<u8>, Error>;
}

impl<R: RegisterIo, P: Platform> RawDevice for Device<R, P> {
    fn create_qp(&self, attr: &QpCreate) -> Result<Qp, Error> {
        Device::create_qp(self, attr)
    }
    fn create_qp_srq(&self, attr: &QpCreate, srq: &Srq) -> Result<Qp, Error> {
        Device::create_qp_srq(self, attr, srq)
    }
    fn attach_qp(&self, qp: &mut Qp, send_cq: &Cq, recv_cq: &Cq) -> Result<(), Error> {
        Device::attach_qp(self, qp, send_cq, recv_cq)
    }
    fn modify_qp(&self, qp: &mut Qp, transition: Transition, attr: &QpModify) -> Result<(), Error> {
        Device::modify_qp(self, qp, transition, attr)
    }
    fn query_qp(&self, qp: &Qp) -> Result<QueryQp, Error> {
        Device::query_qp(self, qp)
    }
    fn destroy_qp(&self, qp: Qp) -> Result<(), Error> {
        Device::destroy_qp(self, qp)
    }
    fn qp_service(&self, qp: &Qp) -> ServiceType {
        qp.service()
    }
    fn qp_state(&self, qp: &Qp) -> QpState {
        qp.state()
    }
    unsafe fn create_mkey(
        &self,
        pd: u32,
        iova: u64,
        len: u64,
        access: MkeyAccess,
        pages: &[u64],
    ) -> Result<Mkey, Error> {
        // SAFETY: the caller upholds `create_mkey`'s contract, which is this one's.
        unsafe { Device::create_mkey(self, pd, iova, len, access, pages) }
    }
    fn destroy_mkey(&self, mkey: Mkey) -> Result<(), Error> {
        Device::destroy_mkey(self, mkey)
    }
    fn create_cq(&self, log_size: u8, eqn: u32) -> Result<Cq, Error> {
        Device::create_cq(self, log_size, eqn)
    }
    fn destroy_cq(&self, cq: Cq) -> Result<(), Error> {
        Device::destroy_cq(self, cq)
    }
    fn alloc_pd(&self) -> Result<u32, Error> {
        Device::alloc_pd(self)
    }
    fn dealloc_pd(&self, pd: u32) -> Result<(), Error> {
        Device::dealloc_pd(self, pd)
    }
    fn alloc_uar(&self) -> Result<u32, Error> {
        Device::alloc_uar(self)
    }
    fn dealloc_uar(&self, uar: u32) -> Result<(), Error> {
        Device::dealloc_uar(self, uar)
    }
    fn exec(&self, input: &[u8], out_len: usize) -> Result<Vec<u8>, Error> {
        Device::exec(self, input, out_len)
    }
}
