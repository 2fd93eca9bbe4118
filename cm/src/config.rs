//! The manager's tunables ([`CmConfig`]) and counters ([`CmStats`]).

/// Q_Key of UD ids in the UDP and IB port spaces (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Tunables of a [`Cm`](crate::Cm). The defaults are Linux's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// CM response timeout exponent sent in REQs (4.096 µs × 2^t; 20 ≈ 4.3 s).
    pub cm_response_timeout: u8,
    /// REQ/REP/DREQ retransmissions before giving up (4 bits; 15).
    pub max_cm_retries: u8,
    /// Packet life time exponent of synthesised RoCE paths (16).
    pub packet_life_time: u8,
    /// Hop limit of synthesised paths.
    pub hop_limit: u8,
    /// Seed of the random communication IDs, transaction IDs and PSNs, mixed with the
    /// platform's [`entropy`](crate::Platform::entropy) (so the default seed still gives every
    /// run identities of its own).
    pub seed: u64,
    /// Receive buffers of each device's MAD QP (Linux's MAD layer: 512).
    pub mad_recv_slots: u16,
    /// Send buffers of each device's MAD QP (Linux's MAD layer: 128).
    pub mad_send_slots: u16,
    /// A blocking call gives up with ETIMEDOUT after this long (platform clock); `None`
    /// waits forever, as librdmacm does.
    pub wait_limit_ns: Option<u64>,
    /// Give each CQ an id creates a completion channel of its own, as librdmacm does (on
    /// by default). Off, those CQs have none and `get_*_comp` only polls: with providers
    /// whose channels are scarce device objects (an mlx5 channel is an EQ), two channels per
    /// connection limit a device to a few hundred connections at most.
    pub auto_comp_channels: bool,
    /// The progress engine reads each device's asynchronous events (on by default): a
    /// communication-established event (`IBV_EVENT_COMM_EST`, the first packet on a QP whose
    /// RTU has not arrived) completes the passive side's handshake, as the IB CM does for
    /// kernel QPs; every event is then handed on by [`Cm::get_async_event`](crate::Cm::get_async_event).
    /// Off, the application reads them from the provider and passes COMM_EST on with
    /// [`CmId::notify`](crate::CmId::notify) (`rdma_notify`).
    pub watch_async_events: bool,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            hop_limit: 64,
            seed: 0x5eed_0c0f_fee0_4c4d,
            mad_recv_slots: 512,
            mad_send_slots: 128,
            wait_limit_ns: None,
            auto_comp_channels: true,
            watch_async_events: true,
        }
    }
}

/// Counters of the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs sent (including retransmissions).
    pub mads_sent: u64,
    /// MADs received.
    pub mads_received: u64,
    /// Retransmissions (REQ, REP, DREQ, SIDR_REQ).
    pub retransmits: u64,
    /// Received MADs that did not decode, or arrived in error.
    pub bad_mads: u64,
    /// MADs that could not be sent (no free buffer, no neighbour, post failure).
    pub send_failures: u64,
    /// REQs dropped because the listener's backlog was full.
    pub backlog_drops: u64,
    /// A device's message transport failed (its QP went to the error state) and was reset.
    pub transport_resets: u64,
    /// Resets that failed (tried again on the next pass).
    pub transport_reset_failures: u64,
    /// Passive connections established by their QP's communication-established event (the
    /// RTU was lost or late).
    pub comm_est_rtus: u64,
    /// Waits of [`CmId::get_send_comp`](crate::CmId::get_send_comp) /
    /// [`get_recv_comp`](crate::CmId::get_recv_comp) that slept on a completion channel
    /// (an event or the end of a slice) instead of spinning.
    pub comp_channel_sleeps: u64,
    /// Asynchronous events dropped because the application did not read them
    /// ([`Cm::get_async_event`](crate::Cm::get_async_event); the oldest go first).
    pub async_events_dropped: u64,
    /// SIDR_REQs of the datagram transport (EFA) refused with SIDR status 2 "rejected"
    /// because they asked for a QP type (UD, SRD) other than their listener's.
    pub qp_type_mismatches: u64,
}
