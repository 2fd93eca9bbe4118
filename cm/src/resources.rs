//! The verbs objects an id owns or holds: the QP's record, the CQs it created, the caller's
//! shared CQs and SRQ, the id's SRQ, and a passive endpoint's saved QP attributes.

use alloc::sync::Arc;

use verbs::{Provider, QpCap, QpType};

use crate::slab::Key;

/// Auto-created CQ with its completion channel (none with
/// [`CmConfig::auto_comp_channels`] off).
pub(crate) struct AutoCq<P: Provider> {
    /// Shared with the attributes `create_qp` wrote back.
    pub cq: Arc<P::Cq>,
    pub channel: Option<P::CompChannel>,
}

/// What the manager's state records of an id's QP (the QP itself lives in the id's
/// [`IdPath`], behind the id's own lock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpRec {
    pub pd: Key,
    pub qpn: u32,
    /// The QP receives from an SRQ.
    pub on_srq: bool,
}

/// An id's QP with the CQs it created and the caller's objects it holds.
pub(crate) struct LiveQp<P: Provider> {
    pub qp: P::Qp,
    pub send_cq: Option<AutoCq<P>>,
    pub recv_cq: Option<AutoCq<P>>,
    /// The caller's CQs and SRQ the QP uses (held while it exists; never destroyed by the
    /// manager): the user send CQ, the user receive CQ, the SRQ (the caller's or the id's).
    pub user: UserObjs<P>,
    /// An SRD id's peer once the service resolution completed: the `rdma_verbs.h` helpers
    /// send there when the work request names no destination.
    pub peer: Option<PeerDest<P>>,
}

/// Where an SRD id's work requests go: an AH on the QP's PD, the peer's QPN and Q_Key.
pub(crate) struct PeerDest<P: Provider> {
    pub ah: P::Ah,
    pub qpn: u32,
    pub qkey: u32,
}

impl<P: Provider> LiveQp<P> {
    /// The CQ the QP's sends complete on (the caller's, the id's, or the receive CQ when the
    /// QP was created with none for sends, as `create_qp` chose).
    pub fn send_cq(&self) -> Option<&P::Cq> {
        self.user
            .send_cq
            .as_deref()
            .or(self.send_cq.as_ref().map(|a| &*a.cq))
            .or(self.recv_cq.as_ref().map(|a| &*a.cq))
            .or(self.user.recv_cq.as_deref())
    }

    /// The CQ the QP's receives complete on.
    pub fn recv_cq(&self) -> Option<&P::Cq> {
        self.user
            .recv_cq
            .as_deref()
            .or(self.recv_cq.as_ref().map(|a| &*a.cq))
            .or_else(|| self.send_cq())
    }
}

/// The objects an id's data path uses, behind the id's own lock (not the manager's): the
/// device's provider (shared), the id's QP and the id's SRQ. The progress engine takes this
/// lock for the QP's transitions; posts and polls take only it.
pub(crate) struct IdPath<P: Provider> {
    pub provider: Option<Arc<P>>,
    pub qp: Option<LiveQp<P>>,
    pub srq: Option<Arc<P::Srq>>,
}

/// The shared cell of an id's [`IdPath`].
pub(crate) type PathCell<P> = Arc<spin::Mutex<IdPath<P>>>;

/// A new, empty cell.
pub(crate) fn new_path<P: Provider>() -> PathCell<P> {
    Arc::new(spin::Mutex::new(IdPath {
        provider: None,
        qp: None,
        srq: None,
    }))
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
