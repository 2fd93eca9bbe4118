//! DMA memory handed to the device.

/// A DMA buffer the device may still use: dropping it leaks the memory (see
/// [`nic_hal::DeviceBuf`]).
pub(crate) use nic_hal::DeviceBuf as Shared;
pub(crate) use nic_hal::address_space;
