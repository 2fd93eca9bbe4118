//! Attach errors, and the mapping from errno values and `vfio-ioctls` errors to them.

use std::fmt;
use std::path::PathBuf;

use crate::pci::PciAddressError;

/// The step of the attach sequence an OS error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Opening the container, `/dev/vfio/vfio`.
    OpenContainer,
    /// Opening the group node `/dev/vfio/<group>` and reading its status.
    OpenGroup,
    /// `VFIO_GROUP_SET_CONTAINER`.
    SetContainer,
    /// `VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU)` and the extension checks before it.
    SetIommu,
    /// `VFIO_GROUP_GET_DEVICE_FD`.
    GetDeviceFd,
    /// `VFIO_DEVICE_GET_INFO`.
    DeviceInfo,
    /// `VFIO_DEVICE_GET_REGION_INFO`.
    RegionInfo,
    /// `mmap` of the BAR through the device fd.
    MapBar,
    /// A read or write of the config-space region.
    Config,
    /// `VFIO_DEVICE_RESET`.
    Reset,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::OpenContainer => "opening the VFIO container",
            Stage::OpenGroup => "opening the IOMMU group",
            Stage::SetContainer => "adding the group to the container (VFIO_GROUP_SET_CONTAINER)",
            Stage::SetIommu => "selecting the type1v2 IOMMU (VFIO_SET_IOMMU)",
            Stage::GetDeviceFd => "getting the device fd (VFIO_GROUP_GET_DEVICE_FD)",
            Stage::DeviceInfo => "reading the device info (VFIO_DEVICE_GET_INFO)",
            Stage::RegionInfo => "reading the region info (VFIO_DEVICE_GET_REGION_INFO)",
            Stage::MapBar => "mapping the BAR",
            Stage::Config => "accessing config space",
            Stage::Reset => "resetting the device (VFIO_DEVICE_RESET)",
        })
    }
}

/// Why [`attach`](crate::attach) failed. Each `Display` says what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// The address is not `DDDD:BB:DD.F`.
    InvalidAddress(PciAddressError),
    /// VFIO is not available: `path` (the container `/dev/vfio/vfio`, or the group node) does
    /// not exist.
    NoVfio {
        /// The node that is missing.
        path: PathBuf,
    },
    /// No PCI function with this address exists.
    NoSuchDevice {
        /// The address asked for.
        bdf: String,
    },
    /// The function has no driver; it must be bound to vfio-pci.
    NotBound {
        /// The function.
        bdf: String,
    },
    /// The function is bound to another driver (mlx5_core, ...).
    BoundToOtherDriver {
        /// The function.
        bdf: String,
        /// The driver it is bound to.
        driver: String,
    },
    /// The function has no IOMMU group: the IOMMU is off (or absent).
    NoIommuGroup {
        /// The function.
        bdf: String,
    },
    /// The IOMMU group contains devices still bound to host drivers.
    GroupNotViable {
        /// The group number.
        group: u32,
        /// Other members of the group and their drivers (as far as sysfs tells).
        others: Vec<(String, String)>,
    },
    /// Opening a VFIO node was refused (EACCES/EPERM).
    PermissionDenied {
        /// The node.
        path: PathBuf,
    },
    /// The group or device is already open in another process (EBUSY).
    Busy {
        /// The node or device.
        path: PathBuf,
    },
    /// The kernel's VFIO does not offer the type1v2 IOMMU backend.
    IommuUnsupported {
        /// What the kernel said.
        detail: String,
    },
    /// The BAR does not exist (size 0).
    NoSuchBar {
        /// The BAR index.
        bar: u32,
    },
    /// The BAR cannot be memory-mapped.
    BarNotMappable {
        /// The BAR index.
        bar: u32,
        /// Why.
        reason: String,
    },
    /// A config-space access failed or gave an impossible value.
    ConfigSpace {
        /// Which access.
        what: String,
        /// The errno, if a system call failed.
        errno: Option<i32>,
    },
    /// `VFIO_DEVICE_RESET` failed.
    Reset {
        /// The errno.
        errno: i32,
    },
    /// Any other failure of a VFIO step.
    Vfio {
        /// The step.
        stage: Stage,
        /// The errno, if the step was a system call.
        errno: Option<i32>,
        /// What failed.
        detail: String,
    },
}

fn os(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::InvalidAddress(e) => write!(f, "{e}"),
            AttachError::NoVfio { path } => write!(
                f,
                "VFIO is not available: {} does not exist. Load the driver (`modprobe vfio-pci`) \
                 and enable the IOMMU (`intel_iommu=on` or `amd_iommu=on` on the kernel command \
                 line; in a QEMU guest add `-device intel-iommu` and use `-machine q35`)",
                path.display()
            ),
            AttachError::NoSuchDevice { bdf } => write!(
                f,
                "no PCI function {bdf}: /sys/bus/pci/devices/{bdf} does not exist (see `lspci -D`)"
            ),
            AttachError::NotBound { bdf } => write!(
                f,
                "{bdf} has no driver; bind it to vfio-pci: `driverctl set-override {bdf} vfio-pci` \
                 (or `echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override; \
                 echo {bdf} > /sys/bus/pci/drivers_probe`)"
            ),
            AttachError::BoundToOtherDriver { bdf, driver } => write!(
                f,
                "{bdf} is bound to {driver}, not vfio-pci; rebind it: \
                 `driverctl set-override {bdf} vfio-pci` (or `echo {bdf} > \
                 /sys/bus/pci/devices/{bdf}/driver/unbind; echo vfio-pci > \
                 /sys/bus/pci/devices/{bdf}/driver_override; echo {bdf} > \
                 /sys/bus/pci/drivers_probe`)"
            ),
            AttachError::NoIommuGroup { bdf } => write!(
                f,
                "{bdf} has no IOMMU group (/sys/bus/pci/devices/{bdf}/iommu_group is missing): \
                 the IOMMU is off; enable it on the kernel command line (`intel_iommu=on` or \
                 `amd_iommu=on`; in a QEMU guest `-device intel-iommu`)"
            ),
            AttachError::GroupNotViable { group, others } => {
                write!(
                    f,
                    "IOMMU group {group} is not viable: every device in it must be bound to \
                     vfio-pci (or unbound)"
                )?;
                if !others.is_empty() {
                    write!(f, "; still bound elsewhere:")?;
                    for (bdf, drv) in others {
                        write!(f, " {bdf} ({drv})")?;
                    }
                }
                Ok(())
            }
            AttachError::PermissionDenied { path } => write!(
                f,
                "permission denied opening {}: run as root, or give your user access to the node \
                 (e.g. `chown $USER {}`) and raise the memlock limit",
                path.display(),
                path.display()
            ),
            AttachError::Busy { path } => write!(
                f,
                "{} is busy: another process (a VMM, another driver instance) has the group or \
                 device open",
                path.display()
            ),
            AttachError::IommuUnsupported { detail } => write!(
                f,
                "the kernel's VFIO has no usable type1v2 IOMMU backend ({detail}); load \
                 vfio_iommu_type1 (`modprobe vfio_iommu_type1`) and check that the IOMMU is on"
            ),
            AttachError::NoSuchBar { bar } => {
                write!(f, "BAR{bar} does not exist on this function (size 0)")
            }
            AttachError::BarNotMappable { bar, reason } => {
                write!(f, "BAR{bar} cannot be memory-mapped: {reason}")
            }
            AttachError::ConfigSpace { what, errno } => match errno {
                Some(e) => write!(f, "config space {what} failed: {}", os(*e)),
                None => write!(f, "config space {what}"),
            },
            AttachError::Reset { errno } => {
                write!(f, "VFIO_DEVICE_RESET failed: {}", os(*errno))
            }
            AttachError::Vfio {
                stage,
                errno,
                detail,
            } => match errno {
                Some(e) => write!(f, "{stage} failed: {detail}: {}", os(*e)),
                None => write!(f, "{stage} failed: {detail}"),
            },
        }
    }
}

impl std::error::Error for AttachError {}

impl From<PciAddressError> for AttachError {
    fn from(e: PciAddressError) -> Self {
        AttachError::InvalidAddress(e)
    }
}

/// What the mapping functions need to know about the attach in progress.
#[derive(Clone, Debug, Default)]
pub(crate) struct Context {
    /// The function, as sysfs spells it.
    pub bdf: String,
    /// The container node.
    pub container: PathBuf,
    /// The group node.
    pub group_node: PathBuf,
    /// The group number.
    pub group: u32,
    /// The function's sysfs directory.
    pub sysfs_dev: PathBuf,
    /// Other group members bound to drivers that make the group not viable.
    pub blockers: Vec<(String, String)>,
    /// The BAR being mapped.
    pub bar: u32,
}

/// The error for an OS failure `errno` at `stage`.
pub(crate) fn from_errno(stage: Stage, errno: i32, ctx: &Context) -> AttachError {
    use libc::*;
    match (stage, errno) {
        (Stage::OpenContainer, ENOENT | ENODEV | ENXIO) => AttachError::NoVfio {
            path: ctx.container.clone(),
        },
        (Stage::OpenGroup, ENOENT | ENODEV | ENXIO) => AttachError::NoVfio {
            path: ctx.group_node.clone(),
        },
        (Stage::OpenContainer, EACCES | EPERM) => AttachError::PermissionDenied {
            path: ctx.container.clone(),
        },
        (Stage::OpenGroup | Stage::SetContainer, EACCES | EPERM) => AttachError::PermissionDenied {
            path: ctx.group_node.clone(),
        },
        (Stage::GetDeviceFd, EACCES | EPERM) => AttachError::PermissionDenied {
            path: ctx.sysfs_dev.clone(),
        },
        (Stage::OpenGroup | Stage::SetContainer, EBUSY) => AttachError::Busy {
            path: ctx.group_node.clone(),
        },
        (Stage::GetDeviceFd, EBUSY) => AttachError::Busy {
            path: ctx.sysfs_dev.clone(),
        },
        (Stage::GetDeviceFd, ENODEV | ENOENT) => AttachError::NoSuchDevice {
            bdf: ctx.bdf.clone(),
        },
        (Stage::SetIommu, ENODEV | EINVAL) => AttachError::IommuUnsupported {
            detail: format!("VFIO_SET_IOMMU: {}", os(errno)),
        },
        (Stage::MapBar, e) => AttachError::BarNotMappable {
            bar: ctx.bar,
            reason: format!("mmap of the device fd failed: {}", os(e)),
        },
        (Stage::Config, e) => AttachError::ConfigSpace {
            what: "access".into(),
            errno: Some(e),
        },
        (Stage::Reset, e) => AttachError::Reset { errno: e },
        (stage, e) => AttachError::Vfio {
            stage,
            errno: Some(e),
            detail: stage_call(stage).into(),
        },
    }
}

fn stage_call(stage: Stage) -> &'static str {
    match stage {
        Stage::OpenContainer | Stage::OpenGroup => "open",
        Stage::SetContainer => "VFIO_GROUP_SET_CONTAINER",
        Stage::SetIommu => "VFIO_SET_IOMMU",
        Stage::GetDeviceFd => "VFIO_GROUP_GET_DEVICE_FD",
        Stage::DeviceInfo => "VFIO_DEVICE_GET_INFO",
        Stage::RegionInfo => "VFIO_DEVICE_GET_REGION_INFO",
        Stage::MapBar => "mmap",
        Stage::Config => "pread/pwrite",
        Stage::Reset => "VFIO_DEVICE_RESET",
    }
}

/// The error for a failure reported by `vfio-ioctls` during container, group or device setup.
pub(crate) fn from_vfio_error(e: &vfio_ioctls::VfioError, ctx: &Context) -> AttachError {
    use vfio_ioctls::VfioError as V;
    let errno_of = |io: &std::io::Error| io.raw_os_error().unwrap_or(libc::EIO);
    let generic = |stage: Stage| AttachError::Vfio {
        stage,
        errno: None,
        detail: e.to_string(),
    };
    match e {
        V::OpenContainer(io) => from_errno(Stage::OpenContainer, errno_of(io), ctx),
        V::OpenGroup(io, _) => from_errno(Stage::OpenGroup, errno_of(io), ctx),
        V::GetGroupStatus => generic(Stage::OpenGroup),
        V::GroupViable => AttachError::GroupNotViable {
            group: ctx.group,
            others: ctx.blockers.clone(),
        },
        V::VfioApiVersion | V::VfioExtension | V::VfioInvalidType | V::VfioType1V2 => {
            AttachError::IommuUnsupported {
                detail: e.to_string(),
            }
        }
        V::GroupSetContainer | V::UnsetContainer => generic(Stage::SetContainer),
        V::ContainerSetIOMMU(se) => from_errno(Stage::SetIommu, se.errno(), ctx),
        V::GroupGetDeviceFD(se) => from_errno(Stage::GetDeviceFd, se.errno(), ctx),
        V::VfioDeviceGetInfo(se) => from_errno(Stage::DeviceInfo, se.errno(), ctx),
        V::VfioDeviceGetInfoPCI | V::VfioDeviceGetInfoOther => generic(Stage::DeviceInfo),
        V::VfioDeviceGetRegionInfo(se) => from_errno(Stage::RegionInfo, se.errno(), ctx),
        // vfio-ioctls reads `<sysfs>/iommu_group` itself and reports a failure as a bad path.
        V::InvalidPath => AttachError::NoIommuGroup {
            bdf: ctx.bdf.clone(),
        },
        _ => generic(Stage::DeviceInfo),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfio_ioctls::VfioError;
    use vmm_sys_util::errno::Error as SysError;

    fn ctx() -> Context {
        Context {
            bdf: "0000:00:02.0".into(),
            container: "/dev/vfio/vfio".into(),
            group_node: "/dev/vfio/2".into(),
            group: 2,
            sysfs_dev: "/sys/bus/pci/devices/0000:00:02.0".into(),
            blockers: vec![("0000:00:02.1".into(), "e1000e".into())],
            bar: 0,
        }
    }

    #[test]
    fn errno_table() {
        use libc::*;
        let c = ctx();
        let container = PathBuf::from("/dev/vfio/vfio");
        let group = PathBuf::from("/dev/vfio/2");
        let dev = PathBuf::from("/sys/bus/pci/devices/0000:00:02.0");
        let table: Vec<(Stage, i32, AttachError)> = vec![
            (
                Stage::OpenContainer,
                ENOENT,
                AttachError::NoVfio {
                    path: container.clone(),
                },
            ),
            (
                Stage::OpenContainer,
                ENODEV,
                AttachError::NoVfio {
                    path: container.clone(),
                },
            ),
            (
                Stage::OpenContainer,
                EACCES,
                AttachError::PermissionDenied {
                    path: container.clone(),
                },
            ),
            (
                Stage::OpenContainer,
                EPERM,
                AttachError::PermissionDenied {
                    path: container.clone(),
                },
            ),
            (
                Stage::OpenGroup,
                ENOENT,
                AttachError::NoVfio {
                    path: group.clone(),
                },
            ),
            (
                Stage::OpenGroup,
                EACCES,
                AttachError::PermissionDenied {
                    path: group.clone(),
                },
            ),
            (
                Stage::OpenGroup,
                EBUSY,
                AttachError::Busy {
                    path: group.clone(),
                },
            ),
            (
                Stage::SetContainer,
                EBUSY,
                AttachError::Busy {
                    path: group.clone(),
                },
            ),
            (
                Stage::GetDeviceFd,
                EBUSY,
                AttachError::Busy { path: dev.clone() },
            ),
            (
                Stage::GetDeviceFd,
                EPERM,
                AttachError::PermissionDenied { path: dev.clone() },
            ),
            (
                Stage::GetDeviceFd,
                ENODEV,
                AttachError::NoSuchDevice {
                    bdf: "0000:00:02.0".into(),
                },
            ),
            (
                Stage::SetIommu,
                ENODEV,
                AttachError::IommuUnsupported {
                    detail: format!("VFIO_SET_IOMMU: {}", os(ENODEV)),
                },
            ),
            (
                Stage::MapBar,
                EINVAL,
                AttachError::BarNotMappable {
                    bar: 0,
                    reason: format!("mmap of the device fd failed: {}", os(EINVAL)),
                },
            ),
            (
                Stage::Config,
                EIO,
                AttachError::ConfigSpace {
                    what: "access".into(),
                    errno: Some(EIO),
                },
            ),
            (Stage::Reset, EINVAL, AttachError::Reset { errno: EINVAL }),
            (
                Stage::DeviceInfo,
                EFAULT,
                AttachError::Vfio {
                    stage: Stage::DeviceInfo,
                    errno: Some(EFAULT),
                    detail: "VFIO_DEVICE_GET_INFO".into(),
                },
            ),
            (
                Stage::OpenContainer,
                EMFILE,
                AttachError::Vfio {
                    stage: Stage::OpenContainer,
                    errno: Some(EMFILE),
                    detail: "open".into(),
                },
            ),
        ];
        for (stage, errno, want) in table {
            let got = from_errno(stage, errno, &c);
            assert_eq!(got, want, "{stage:?} errno {errno}");
            // Every message names something concrete.
            assert!(got.to_string().len() > 20, "{got}");
        }
    }

    #[test]
    fn vfio_ioctls_error_table() {
        use libc::*;
        let c = ctx();
        let io = |e| std::io::Error::from_raw_os_error(e);
        type Check = fn(&AttachError) -> bool;
        let cases: Vec<(VfioError, Check)> = vec![
            (
                VfioError::OpenContainer(io(ENOENT)),
                |e| matches!(e, AttachError::NoVfio { path } if path.ends_with("vfio")),
            ),
            (
                VfioError::OpenGroup(io(EACCES), "2".into()),
                |e| matches!(e, AttachError::PermissionDenied { path } if path.ends_with("2")),
            ),
            (VfioError::OpenGroup(io(EBUSY), "2".into()), |e| {
                matches!(e, AttachError::Busy { .. })
            }),
            (
                VfioError::GroupViable,
                |e| matches!(e, AttachError::GroupNotViable { group: 2, others } if others.len() == 1),
            ),
            (VfioError::VfioType1V2, |e| {
                matches!(e, AttachError::IommuUnsupported { .. })
            }),
            (VfioError::VfioExtension, |e| {
                matches!(e, AttachError::IommuUnsupported { .. })
            }),
            (VfioError::ContainerSetIOMMU(SysError::new(ENODEV)), |e| {
                matches!(e, AttachError::IommuUnsupported { .. })
            }),
            (
                VfioError::GroupGetDeviceFD(SysError::new(EBUSY)),
                |e| matches!(e, AttachError::Busy { path } if path.ends_with("0000:00:02.0")),
            ),
            (
                VfioError::VfioDeviceGetRegionInfo(SysError::new(EINVAL)),
                |e| {
                    matches!(
                        e,
                        AttachError::Vfio {
                            stage: Stage::RegionInfo,
                            errno: Some(EINVAL),
                            ..
                        }
                    )
                },
            ),
            (VfioError::GroupSetContainer, |e| {
                matches!(
                    e,
                    AttachError::Vfio {
                        stage: Stage::SetContainer,
                        errno: None,
                        ..
                    }
                )
            }),
            (VfioError::InvalidPath, |e| {
                matches!(e, AttachError::NoIommuGroup { .. })
            }),
            (VfioError::VfioDeviceGetInfoOther, |e| {
                matches!(
                    e,
                    AttachError::Vfio {
                        stage: Stage::DeviceInfo,
                        ..
                    }
                )
            }),
        ];
        for (err, check) in cases {
            let got = from_vfio_error(&err, &c);
            assert!(check(&got), "{err:?} -> {got:?}");
        }
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = AttachError::NoVfio {
            path: "/dev/vfio/vfio".into(),
        };
        let m = e.to_string();
        assert!(m.contains("/dev/vfio/vfio") && m.contains("vfio-pci") && m.contains("IOMMU"));
        let e = AttachError::BoundToOtherDriver {
            bdf: "0000:3b:00.0".into(),
            driver: "mlx5_core".into(),
        };
        let m = e.to_string();
        assert!(m.contains("mlx5_core") && m.contains("driverctl set-override 0000:3b:00.0"));
        let e = AttachError::GroupNotViable {
            group: 7,
            others: vec![("0000:3b:00.1".into(), "mlx5_core".into())],
        };
        assert!(e.to_string().contains("0000:3b:00.1 (mlx5_core)"));
        let e = AttachError::PermissionDenied {
            path: "/dev/vfio/7".into(),
        };
        assert!(e.to_string().contains("/dev/vfio/7"));
    }
}
