//! PCI identification (`docs/mlx5.md#pci-identification`).

/// Mellanox / NVIDIA networking PCI vendor id.
pub const VENDOR_MELLANOX: u16 = 0x15b3;

/// One mlx5 PCI device id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceId {
    /// PCI device id (vendor [`VENDOR_MELLANOX`]).
    pub device: u16,
    /// Product name.
    pub name: &'static str,
    /// Whether this is a virtual function.
    pub vf: bool,
}

const fn id(device: u16, name: &'static str, vf: bool) -> DeviceId {
    DeviceId { device, name, vf }
}

/// Every mlx5 device id of `docs/mlx5.md#pci-identification`.
pub const CONNECTX_IDS: &[DeviceId] = &[
    id(0x1011, "Connect-IB", false),
    id(0x1012, "Connect-IB VF", true),
    id(0x1013, "ConnectX-4", false),
    id(0x1014, "ConnectX-4 VF", true),
    id(0x1015, "ConnectX-4 Lx", false),
    id(0x1016, "ConnectX-4 Lx VF", true),
    id(0x1017, "ConnectX-5", false),
    id(0x1018, "ConnectX-5 VF", true),
    id(0x1019, "ConnectX-5 Ex", false),
    id(0x101a, "ConnectX-5 Ex VF", true),
    id(0x101b, "ConnectX-6", false),
    id(0x101c, "ConnectX-6 VF", true),
    id(0x101d, "ConnectX-6 Dx", false),
    id(0x101e, "ConnectX family mlx5Gen Virtual Function", true),
    id(0x101f, "ConnectX-6 Lx", false),
    id(0x1021, "ConnectX-7", false),
    id(0x1023, "ConnectX-8", false),
    id(0x1025, "ConnectX-9", false),
    id(0x1027, "ConnectX-10", false),
    id(0x2101, "ConnectX-10 NVLink-C2C", false),
    id(0xa2d2, "BlueField", false),
    id(0xa2d3, "BlueField VF", true),
    id(0xa2d6, "BlueField-2", false),
    id(0xa2dc, "BlueField-3", false),
    id(0xa2df, "BlueField-4", false),
];

/// The table entry for a Mellanox device id, if it is an mlx5 device.
pub fn lookup(vendor: u16, device: u16) -> Option<&'static DeviceId> {
    if vendor != VENDOR_MELLANOX {
        return None;
    }
    CONNECTX_IDS.iter().find(|d| d.device == device)
}

/// Whether `(vendor, device)` is an mlx5 (ConnectX / BlueField) function.
pub fn is_connectx(vendor: u16, device: u16) -> bool {
    lookup(vendor, device).is_some()
}

/// BAR holding the initialization segment and the UAR pages.
pub const REG_BAR: u8 = 0;
