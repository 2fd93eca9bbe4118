//! The verbs objects an id owns or holds: the QP's record, the CQs it created, the caller's
//! shared CQs and SRQ, the id's SRQ, and a passive endpoint's saved QP attributes.

use alloc::sync::Arc;

use verbs::{Provider, QpCap, QpType};

use crate::slab::Key;

/// Auto-created CQ with its completion channel (none with
/// [`CmConfig::auto_comp_channels`] off).
pub(crate) struct AutoCq<P: Provider> {
    pub cq: P::Cq,
    pub channel: Option<P::CompChannel>,
}

pub(crate) struct QpRec<P: Provider> {
    pub qp: P::Qp,
    pub pd: Key,
    pub send_cq: Option<AutoCq<P>>,
    pub recv_cq: Option<AutoCq<P>>,
    /// The caller's CQs and SRQ the QP uses (held while it exists; never destroyed by the
    /// manager): the user send CQ, the user receive CQ, the SRQ (the caller's or the id's).
    pub user: UserObjs<P>,
}

/// Objects of the caller (or of the id, for its SRQ) a QP uses: shared handles, released
/// when the QP is gone.
pub(crate) struct UserObjs<P: Provider> {
    pub send_cq: Option<Arc<P::Cq>>,
    pub recv_cq: Option<Arc<P::Cq>>,
    pub srq: Option<Arc<P::Srq>>,
}

impl<P: Provider> Clone for UserObjs<P> {
    fn clone(&self) -> Self {
        UserObjs {
            send_cq: self.send_cq.clone(),
            recv_cq: self.recv_cq.clone(),
            srq: self.srq.clone(),
        }
    }
}

/// The SRQ of an id (`rdma_create_srq`), on PD `pd` of the id's device.
pub(crate) struct IdSrq<P: Provider> {
    pub srq: Arc<P::Srq>,
    pub pd: Key,
}

/// `qp_init_attr` saved by a passive endpoint for the QPs of its requests (with the user CQs
/// and SRQ it names, which every request's QP shares).
pub(crate) struct SavedAttr<P: Provider> {
    pub qp_type: QpType,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub user: UserObjs<P>,
}

impl<P: Provider> Clone for SavedAttr<P> {
    fn clone(&self) -> Self {
        SavedAttr {
            qp_type: self.qp_type,
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
            user: self.user.clone(),
        }
    }
}
