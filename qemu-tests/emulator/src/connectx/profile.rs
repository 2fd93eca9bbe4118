//! The capabilities the device reports, which also bound its object tables.

/// Capabilities the device reports (QUERY_HCA_CAP, init segment) and bounds its tables by.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Firmware revision `(major, minor, sub_minor)` shown in `fw_rev` / `cmdif_rev_fw_sub`.
    pub fw_rev: (u16, u16, u16),
    /// Size of BAR0 in bytes (default 32 MiB). UAR pages must fit in it.
    pub bar_size: usize,
    /// log2 of the number of command queue entries (`cmdq_addr_l_sz` bits 7:4; at most 5).
    pub log_cmdq_size: u8,
    /// log2 of the command entry stride in bytes (`cmdq_addr_l_sz` bits 3:0; at least 6).
    pub log_cmdq_stride: u8,
    /// Pages QUERY_PAGES(boot) asks for.
    pub boot_pages: u32,
    /// Pages QUERY_PAGES(init) asks for.
    pub init_pages: u32,
    /// `log_max_qp`: QP numbers are `2 .. 1 << log_max_qp` (plus QP1).
    pub log_max_qp: u8,
    /// `log_max_cq`: CQ numbers are `1 .. 1 << log_max_cq`.
    pub log_max_cq: u8,
    /// `log_max_eq`: EQ numbers are `1 .. 1 << log_max_eq` (at most 8: EQNs are 8 bits).
    pub log_max_eq: u8,
    /// `log_max_mkey`: mkey indexes are `1 .. 1 << log_max_mkey`.
    pub log_max_mkey: u8,
    /// `log_max_pd`: PD numbers are `1 .. 1 << log_max_pd`.
    pub log_max_pd: u8,
    /// `log_max_transport_domain`: TD numbers are `1 .. 1 << log_max_td`.
    pub log_max_td: u8,
    /// Number of UAR pages ALLOC_UAR can hand out (indexes start at 3, above the init segment).
    pub max_uars: u32,
    /// `log_max_qp_sz`: log2 max WQEs (SQ: 64-byte basic blocks) per work queue.
    pub log_max_qp_sz: u8,
    /// `log_max_cq_sz`: log2 max CQEs per CQ.
    pub log_max_cq_sz: u8,
    /// `log_max_eq_sz`: log2 max EQEs per EQ.
    pub log_max_eq_sz: u8,
    /// `log_max_msg`: log2 max message size.
    pub log_max_msg: u8,
    /// `max_wqe_sz_sq`: max send WQE size in bytes.
    pub max_wqe_sz_sq: u16,
    /// `max_wqe_sz_rq`: max receive WQE size in bytes.
    pub max_wqe_sz_rq: u16,
    /// `log_bf_reg_size`: log2 BlueFlame register size in bytes.
    pub log_bf_reg_size: u8,
    /// Port type: Ethernet (RoCE) when true, InfiniBand otherwise.
    pub port_type_eth: bool,
    /// Permanent MAC address (QUERY_NIC_VPORT_CONTEXT).
    pub mac: [u8; 6],
    /// Reads of BAR0 0x1fc (or polls) that still show `initializing` after reset.
    pub init_delay_reads: u32,
    /// Enforce command entry / mailbox signatures while `cmdif_checksum` is on (the driver turns
    /// it off with SET_HCA_CAP). When false the device reports `cmdif_checksum = 0` and never
    /// checks.
    pub cmd_signatures: bool,
    /// The port's IPv4 address on the wire while no fabric port is attached (with a port
    /// attached, the port's address is used). `None`: the IPv4 address of the source GID the
    /// driver programs with SET_ROCE_ADDRESS (an IPv4-mapped GID). Either way the device
    /// takes packets for this address, the port's, and every IPv4-mapped GID in its table.
    pub ipv4: Option<std::net::Ipv4Addr>,
    /// Unit of the RC ACK timeout: the timeout is `ack_timeout_unit_ns << ack_timeout`
    /// (4096 = the IB 4.096 µs; tests use a smaller unit to run fast).
    pub ack_timeout_unit_ns: u64,
    /// Unit of the RNR NAK timer table, whose entries are multiples of 10 µs: the wait for
    /// code `c` is `table[c] / 10 µs × rnr_timer_unit_ns` (10 000 = real time).
    pub rnr_timer_unit_ns: u64,
    /// The atomic capability page offers host-endian atomic responses
    /// (`supported_atomic_req_8B_endianness_mode_1`).
    pub atomic_host_endianness: bool,
    /// The PCI device id the function presents (vendor 0x15b3): a physical function (default
    /// ConnectX-5, 0x1017) or a virtual function (e.g. ConnectX-5 VF, 0x1018; see
    /// [`Profile::connectx5_vf`]). A VF reports the capabilities of a VF (no vport group
    /// manager, a vHCA id of its own) and refuses what belongs to the PF (the HOST_ENDIANNESS
    /// register).
    pub pci_device_id: u16,
    /// Runtime page requests: the firmware asks for pages (and gives them back) while objects
    /// are created and destroyed, not only at boot. On by default
    /// ([`PageRequests::TESTS`]: every third create needs two pages, given back after
    /// destroys), so that every test meets them; `PageRequests::default()` turns them off.
    pub page_requests: PageRequests,
    /// MSI-X vectors of the function (its MSI-X table size, default 8): an EQ context's
    /// `intr` must name one of them (CREATE_EQ fails with BAD_PARAM,
    /// [`syndrome::BAD_VECTOR`](crate::syndrome::BAD_VECTOR), otherwise).
    pub msix_vectors: u16,
}

/// How the firmware asks for pages at run time ([`Profile::page_requests`]).
///
/// Every `every`-th create of a QP, CQ, MKEY or SRQ (RMP) needs `pages` more 4 KB pages: the
/// device raises a PAGE_REQUEST event (`num_pages > 0`) on the EQs subscribed to it and
/// keeps the command (its entry stays hardware-owned) until the driver gave enough pages with
/// MANAGE_PAGES GIVE on another command slot; MANAGE_PAGES CANT_GIVE fails the waiting create
/// (NO_RES, [`syndrome::PAGES_REFUSED`](crate::syndrome::PAGES_REFUSED)). With `reclaim`, the
/// pages of a destroyed object (or of a create that failed) are spare again and the device
/// asks the driver to take them back (PAGE_REQUEST, `num_pages < 0`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageRequests {
    /// Which creates need pages: every `every`-th one (1 = each); 0 = none (off).
    pub every: u32,
    /// Pages one such create needs (0 acts as 1).
    pub pages: u32,
    /// Ask for the pages of destroyed objects back.
    pub reclaim: bool,
}

impl PageRequests {
    /// The default of [`Profile`]: every third create of a QP, CQ, MKEY or SRQ needs two
    /// pages, and the pages of destroyed objects are asked back.
    pub const TESTS: PageRequests = PageRequests {
        every: 3,
        pages: 2,
        reclaim: true,
    };

    /// Every create needs `pages` pages; destroyed objects' pages are asked back.
    pub fn each_create(pages: u32) -> PageRequests {
        PageRequests {
            every: 1,
            pages,
            reclaim: true,
        }
    }
}

impl Profile {
    /// The profile of a ConnectX-5 virtual function (PCI device id 0x1018).
    pub fn connectx5_vf() -> Profile {
        Profile {
            pci_device_id: 0x1018,
            ..Profile::default()
        }
    }

    /// Whether the function is a virtual function (its PCI device id is a ConnectX VF's).
    pub fn is_vf(&self) -> bool {
        firmware_interface::pci::lookup(
            firmware_interface::pci::VENDOR_MELLANOX,
            self.pci_device_id,
        )
        .is_some_and(|d| d.vf)
    }
}

impl Default for Profile {
    fn default() -> Profile {
        Profile {
            fw_rev: (16, 35, 1012),
            bar_size: 32 << 20,
            log_cmdq_size: 5,
            log_cmdq_stride: 6,
            boot_pages: 8,
            init_pages: 16,
            log_max_qp: 10,
            log_max_cq: 10,
            log_max_eq: 4,
            log_max_mkey: 12,
            log_max_pd: 10,
            log_max_td: 8,
            max_uars: 64,
            log_max_qp_sz: 15,
            log_max_cq_sz: 22,
            log_max_eq_sz: 22,
            log_max_msg: 30,
            max_wqe_sz_sq: 1024,
            max_wqe_sz_rq: 512,
            log_bf_reg_size: 9,
            port_type_eth: true,
            mac: [0x02, 0, 0, 0, 0, 0x01],
            init_delay_reads: 2,
            cmd_signatures: false,
            ipv4: None,
            ack_timeout_unit_ns: 4096,
            rnr_timer_unit_ns: 10_000,
            atomic_host_endianness: true,
            pci_device_id: 0x1017,
            page_requests: PageRequests::TESTS,
            msix_vectors: 8,
        }
    }
}
