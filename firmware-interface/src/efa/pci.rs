//! PCI identification and BARs (`docs/efa.md#pci-identification`).

/// Amazon's PCI vendor id.
pub const VENDOR_AMAZON: u16 = 0x1d0f;

/// Every EFA device id (all virtual functions).
pub const DEVICE_IDS: &[u16] = &[0xefa0, 0xefa1, 0xefa2, 0xefa3, 0xefa4];

/// Whether `(vendor, device)` is an EFA function.
pub fn is_efa(vendor: u16, device: u16) -> bool {
    vendor == VENDOR_AMAZON && DEVICE_IDS.contains(&device)
}

/// BAR of the registers (BAR0).
pub const REG_BAR: u8 = 0;
/// BAR of the low-latency SQ rings (BAR2, mapped write-combining).
pub const MEM_BAR: u8 = 2;
/// MSI-X vector of the admin completion queue and the AENQ.
pub const MGMNT_MSIX_VEC: u16 = 0;
/// First MSI-X vector of the completion EQs.
pub const COMP_EQS_VEC_BASE: u16 = 1;
