//! Attach tests that need no /dev/vfio: sysfs checks against a fake tree, config-space
//! read-modify-write against files, ioctl numbers, and the real-path attach of a made-up BDF.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A throwaway sysfs + /dev/vfio tree, removed on drop.
struct FakeTree {
    root: PathBuf,
}

impl FakeTree {
    fn new() -> FakeTree {
        let root = std::env::temp_dir().join(format!(
            "vfio-attach-sysfs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
        std::fs::create_dir_all(root.join("dev/vfio")).unwrap();
        FakeTree { root }
    }

    fn paths(&self) -> SysPaths {
        SysPaths {
            sysfs: self.root.join("sys"),
            dev_vfio: self.root.join("dev/vfio"),
        }
    }

    fn with_vfio_node(self) -> Self {
        std::fs::write(self.root.join("dev/vfio/vfio"), b"").unwrap();
        self
    }

    /// A device directory with optional driver and IOMMU group links, as sysfs lays them out.
    fn device(self, bdf: &str, driver: Option<&str>, group: Option<u32>) -> Self {
        let sys = self.root.join("sys");
        let dev = sys.join("devices/pci0000:00").join(bdf);
        std::fs::create_dir_all(&dev).unwrap();
        let link = sys.join("bus/pci/devices").join(bdf);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dev, &link).unwrap();
        if let Some(d) = driver {
            let drv = sys.join("bus/pci/drivers").join(d);
            std::fs::create_dir_all(&drv).unwrap();
            std::os::unix::fs::symlink(&drv, dev.join("driver")).unwrap();
        }
        if let Some(g) = group {
            let gdir = sys.join("kernel/iommu_groups").join(g.to_string());
            std::fs::create_dir_all(gdir.join("devices")).unwrap();
            std::os::unix::fs::symlink(&dev, gdir.join("devices").join(bdf)).unwrap();
            std::os::unix::fs::symlink(&gdir, dev.join("iommu_group")).unwrap();
        }
        self
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const BDF: &str = "0000:00:02.0";

#[test]
fn preflight_table() {
    let opts = AttachOptions::default();
    type Check = fn(&Result<(PciAddress, Context), AttachError>, &FakeTree) -> bool;
    type Case = (&'static str, fn() -> FakeTree, &'static str, Check);
    let cases: Vec<Case> = vec![
        (
            "bad address",
            || FakeTree::new().with_vfio_node(),
            "0000:00:02",
            |r, _| matches!(r, Err(AttachError::InvalidAddress(_))),
        ),
        (
            "no /dev/vfio/vfio, even for a missing device",
            FakeTree::new,
            BDF,
            |r, t| {
                r.as_ref().err()
                    == Some(&AttachError::NoVfio {
                        path: t.root.join("dev/vfio/vfio"),
                    })
            },
        ),
        (
            "no such device",
            || FakeTree::new().with_vfio_node(),
            BDF,
            |r, _| r.as_ref().err() == Some(&AttachError::NoSuchDevice { bdf: BDF.into() }),
        ),
        (
            "no driver",
            || FakeTree::new().with_vfio_node().device(BDF, None, Some(3)),
            BDF,
            |r, _| r.as_ref().err() == Some(&AttachError::NotBound { bdf: BDF.into() }),
        ),
        (
            "bound to mlx5_core",
            || {
                FakeTree::new()
                    .with_vfio_node()
                    .device(BDF, Some("mlx5_core"), Some(3))
            },
            BDF,
            |r, _| {
                r.as_ref().err()
                    == Some(&AttachError::BoundToOtherDriver {
                        bdf: BDF.into(),
                        driver: "mlx5_core".into(),
                    })
            },
        ),
        (
            "no IOMMU group",
            || {
                FakeTree::new()
                    .with_vfio_node()
                    .device(BDF, Some("vfio-pci"), None)
            },
            BDF,
            |r, _| r.as_ref().err() == Some(&AttachError::NoIommuGroup { bdf: BDF.into() }),
        ),
        (
            "vfio-pci in group 3",
            || {
                FakeTree::new()
                    .with_vfio_node()
                    .device(BDF, Some("vfio-pci"), Some(3))
            },
            BDF,
            |r, t| match r {
                Ok((a, c)) => {
                    a.to_string() == BDF
                        && c.group == 3
                        && c.group_node == t.root.join("dev/vfio/3")
                        && c.container == t.root.join("dev/vfio/vfio")
                        && c.sysfs_dev == t.root.join("sys/bus/pci/devices").join(BDF)
                        && c.blockers.is_empty()
                }
                Err(_) => false,
            },
        ),
        (
            "a vendor variant driver (mlx5_vfio_pci), address in upper case",
            || {
                FakeTree::new().with_vfio_node().device(
                    "0000:3b:00.0",
                    Some("mlx5_vfio_pci"),
                    Some(9),
                )
            },
            "0000:3B:00.0",
            |r, _| matches!(r, Ok((_, c)) if c.group == 9 && c.bdf == "0000:3b:00.0"),
        ),
        (
            "group members bound elsewhere are listed",
            || {
                FakeTree::new()
                    .with_vfio_node()
                    .device(BDF, Some("vfio-pci"), Some(5))
                    .device("0000:00:02.1", Some("e1000e"), Some(5))
                    .device("0000:00:02.2", Some("vfio-pci"), Some(5))
                    .device("0000:00:02.3", None, Some(5))
                    .device("0000:00:02.4", Some("pci-stub"), Some(5))
            },
            BDF,
            |r, _| {
                matches!(r, Ok((_, c))
                    if c.blockers == vec![("0000:00:02.1".to_string(), "e1000e".to_string())])
            },
        ),
    ];
    for (name, make, bdf, check) in cases {
        let tree = make();
        let r = preflight(&tree.paths(), bdf, &opts);
        assert!(check(&r, &tree), "{name}: {r:?}");
        if let Err(e) = &r {
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn attach_through_vfio_ioctls_maps_its_errors() {
    // A fake tree that passes every sysfs check; the next step is vfio-ioctls opening the real
    // /dev/vfio/vfio. Only meaningful (and harmless) where that node does not exist.
    if Path::new("/dev/vfio/vfio").exists() {
        return;
    }
    let tree = FakeTree::new()
        .with_vfio_node()
        .device(BDF, Some("vfio-pci"), Some(3));
    let err = attach_at(&tree.paths(), BDF, &AttachOptions::default()).unwrap_err();
    assert!(matches!(err, AttachError::NoVfio { .. }), "{err:?}");
    let err = attach_at(
        &tree.paths(),
        BDF,
        &AttachOptions {
            bar: 6,
            ..AttachOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(err, AttachError::NoSuchBar { bar: 6 });
}

#[test]
fn attach_without_vfio_or_a_made_up_device() {
    let bdf = "0000:ff:1f.7";
    let err = attach(bdf, &AttachOptions::default()).unwrap_err();
    let msg = err.to_string();
    if !Path::new("/dev/vfio/vfio").exists() {
        assert_eq!(
            err,
            AttachError::NoVfio {
                path: "/dev/vfio/vfio".into()
            }
        );
        assert!(
            msg.contains("modprobe vfio-pci") && msg.contains("intel_iommu=on"),
            "{msg}"
        );
    } else if !Path::new("/sys/bus/pci/devices").join(bdf).exists() {
        assert_eq!(err, AttachError::NoSuchDevice { bdf: bdf.into() });
        assert!(msg.contains(bdf), "{msg}");
    } else {
        // Some Xeons really have uncore functions on bus ff; none is bound to vfio-pci.
        assert!(
            matches!(
                err,
                AttachError::NotBound { .. } | AttachError::BoundToOtherDriver { .. }
            ),
            "{err:?}"
        );
    }
}

#[test]
fn vfio_driver_names() {
    assert!(is_vfio_driver("vfio-pci"));
    assert!(is_vfio_driver("mlx5_vfio_pci"));
    assert!(!is_vfio_driver("mlx5_core"));
    assert!(!is_vfio_driver("vfio_pci_core"));
    assert!(!is_vfio_driver(""));
}

#[test]
fn ioctl_numbers_match_linux_vfio_h() {
    // _IO(';', 100 + 7) and _IO(';', 100 + 11)
    assert_eq!(VFIO_DEVICE_GET_INFO, 0x3b6b);
    assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
}

fn temp_file(name: &str, len: usize) -> (std::fs::File, PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "vfio-attach-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(len as u64).unwrap();
    (f, path)
}

#[test]
fn device_ioctls_on_a_non_vfio_fd_fail_with_errno() {
    let (f, path) = temp_file("ioctl", 0);
    let ctx = Context::default();
    let e = device_info(f.as_raw_fd()).unwrap_err();
    assert_eq!(e, libc::ENOTTY);
    assert_eq!(
        from_errno(Stage::DeviceInfo, e, &ctx),
        AttachError::Vfio {
            stage: Stage::DeviceInfo,
            errno: Some(libc::ENOTTY),
            detail: "VFIO_DEVICE_GET_INFO".into()
        }
    );
    let e = device_reset(f.as_raw_fd()).unwrap_err();
    assert_eq!(
        from_errno(Stage::Reset, e, &ctx),
        AttachError::Reset {
            errno: libc::ENOTTY
        }
    );
    drop(f);
    let _ = std::fs::remove_file(path);
}

#[test]
fn command_register_read_modify_write() {
    // A config "region" at offset 0x1000 of a file, as the device fd places it at some offset.
    let (f, path) = temp_file("config", 0x1100);
    let cfg = ConfigSpace {
        fd: f.as_raw_fd(),
        offset: 0x1000,
        size: 0x100,
    };
    // vendor 0x15b3, device 0x101b, command = INTx disable (bit 10) only
    sys::pwrite_all(cfg.fd, &[0xb3, 0x15, 0x1b, 0x10, 0x00, 0x04], 0x1000).unwrap();
    assert_eq!(cfg.read16(PCI_VENDOR_ID).unwrap(), 0x15b3);
    assert_eq!(cfg.read16(PCI_DEVICE_ID).unwrap(), 0x101b);
    assert_eq!(enable_command(&cfg, false).unwrap(), 0x0402);
    assert_eq!(enable_command(&cfg, true).unwrap(), 0x0406);
    let mut raw = [0u8; 2];
    sys::pread_exact(cfg.fd, &mut raw, 0x1004).unwrap();
    assert_eq!(raw, [0x06, 0x04], "other bits kept, little-endian");
    // Already enabled: nothing to change, still Ok.
    assert_eq!(enable_command(&cfg, true).unwrap(), 0x0406);
    // Out of the region: refused before any system call.
    let err = cfg.read16(0xff).unwrap_err();
    assert!(
        matches!(err, AttachError::ConfigSpace { errno: None, .. }),
        "{err}"
    );
    assert!(cfg.write(0x100, &[0]).is_err());
    drop(f);
    let _ = std::fs::remove_file(path);
}

#[test]
fn command_bits_that_do_not_stick_are_an_error() {
    // /dev/zero reads as zeros and swallows writes: like a function that ignores the write.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/zero")
        .unwrap();
    let cfg = ConfigSpace {
        fd: f.as_raw_fd(),
        offset: 0,
        size: 0x100,
    };
    let err = enable_command(&cfg, true).unwrap_err();
    assert!(err.to_string().contains("did not stick"), "{err}");
    // A failing read carries its errno.
    let cfg = ConfigSpace {
        fd: -1,
        offset: 0,
        size: 0x100,
    };
    assert_eq!(
        cfg.read16(PCI_COMMAND).unwrap_err(),
        AttachError::ConfigSpace {
            what: "read at 0x4".into(),
            errno: Some(libc::EBADF)
        }
    );
}

#[test]
fn sparse_mmap_coverage() {
    let a = |offset, size| VfioRegionSparseMmapArea { offset, size };
    assert!(sparse_covers(&[a(0, 0x4000)], 0x4000));
    assert!(sparse_covers(&[a(0x2000, 0x2000), a(0, 0x2000)], 0x4000));
    assert!(sparse_covers(&[a(0, 0x3000), a(0x1000, 0x3000)], 0x4000));
    // A hole where the MSI-X table sits.
    assert!(!sparse_covers(&[a(0, 0x2000), a(0x3000, 0x1000)], 0x4000));
    assert!(!sparse_covers(&[a(0x1000, 0x3000)], 0x4000));
    assert!(!sparse_covers(&[a(0, 0x2000)], 0x4000));
    assert!(!sparse_covers(&[], 0x4000));
}
