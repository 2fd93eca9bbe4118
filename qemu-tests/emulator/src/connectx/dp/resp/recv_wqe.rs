//! Receive WQEs for incoming messages: taking the one at the RQ consumer counter or from the
//! attached SRQ, and reporting an empty queue (the RNR case).

use roce_wire::packet::NakCode;

use super::RespErr;
use crate::connectx::dp::mkey::Sgl;
use crate::connectx::dp::srq::SrqTake;
use crate::connectx::dp::wq::rq_geometry;
use crate::{Device, DeviceError};

impl Device {
    /// Reserves (reads and translates) the receive WQE at the RQ consumer counter.
    pub(super) fn reserve_recv(&mut self, qpn: u32) -> Result<Sgl, RespErr> {
        if let Some(srqn) = self.srq_of(qpn) {
            return self.reserve_srq(qpn, srqn, true);
        }
        let (n, ci) = {
            let qp = self.obj.qps.get(qpn).ok_or(RespErr::Fatal)?;
            let (n, _) = rq_geometry(qp).ok_or(RespErr::Invalid)?;
            (n, qp.dp.rq_ci)
        };
        let pi = self.rq_producer(qpn).ok_or(RespErr::Fatal)?;
        if pi == ci {
            return Err(RespErr::Rnr);
        }
        if u32::from(pi.wrapping_sub(ci)) > n {
            self.error(DeviceError::WqOverflow {
                qpn,
                sq: false,
                producer: pi,
                consumer: ci,
            });
            return Err(RespErr::Fatal);
        }
        match self.fetch_recv_wqe(qpn, ci) {
            Ok(s) => Ok(s),
            Err(None) => Err(RespErr::Fatal),
            Err(Some(synd)) => Err(RespErr::Local(synd, NakCode::RemoteOperationalError)),
        }
    }

    /// Whether a receive WQE is posted (for WRITE with immediate).
    pub(super) fn recv_posted(&mut self, qpn: u32) -> Result<(), RespErr> {
        if let Some(srqn) = self.srq_of(qpn) {
            return self.reserve_srq(qpn, srqn, false).map(|_| ());
        }
        let (n, ci) = {
            let qp = self.obj.qps.get(qpn).ok_or(RespErr::Fatal)?;
            let (n, _) = rq_geometry(qp).ok_or(RespErr::Invalid)?;
            (n, qp.dp.rq_ci)
        };
        let pi = self.rq_producer(qpn).ok_or(RespErr::Fatal)?;
        if pi == ci {
            return Err(RespErr::Rnr);
        }
        if u32::from(pi.wrapping_sub(ci)) > n {
            self.error(DeviceError::WqOverflow {
                qpn,
                sq: false,
                producer: pi,
                consumer: ci,
            });
            return Err(RespErr::Fatal);
        }
        Ok(())
    }

    /// [`reserve_recv`](Self::reserve_recv) for a QP attached to SRQ `srqn`.
    pub(super) fn reserve_srq(
        &mut self,
        qpn: u32,
        srqn: u32,
        scatter: bool,
    ) -> Result<Sgl, RespErr> {
        self.srq_take(qpn, srqn, scatter).map_err(|e| match e {
            SrqTake::Empty => RespErr::Rnr,
            SrqTake::Fatal => RespErr::Fatal,
            SrqTake::Key(synd) => RespErr::Local(synd, NakCode::RemoteOperationalError),
        })
    }
}
