//! The package cache against the real Debian archive (fetches busybox-static into
//! `target/guest-cache` the first time; later runs reuse it).

use guest_kit::{Initramfs, Kit, cpio};

#[test]
fn package_contents_busybox_applets_and_errors() {
    let kit = Kit::new(Kit::default_cache_dir()).expect("cache");
    let debs = kit.fetch(&["busybox-static"]).expect("apt-get download");
    assert!(
        debs[0]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("busybox-static_")
    );
    // a second fetch reuses the file
    assert_eq!(kit.fetch(&["busybox-static"]).unwrap(), debs);

    let mut i = Initramfs::new();
    i.package(&kit, "busybox-static", &["bin/busybox"]).unwrap();
    let mut all = Initramfs::new();
    all.package(&kit, "busybox-static", &[]).unwrap();
    let mut bb = Initramfs::new();
    bb.busybox(&kit.busybox().unwrap()).unwrap();

    let one = cpio::parse(&i.archive().to_bytes()).unwrap();
    let e = one
        .iter()
        .find(|e| e.name == "bin/busybox")
        .expect("bin/busybox");
    assert_eq!(e.mode & 0o170000, cpio::S_IFREG);
    assert_eq!(e.mode & 0o111, 0o111, "executable");
    assert!(e.data.starts_with(b"\x7fELF"));

    let every = cpio::parse(&all.archive().to_bytes()).unwrap();
    assert!(every.iter().any(|e| e.name == "bin/busybox"));
    assert!(
        !every.iter().any(|e| e.name.starts_with("usr/share")),
        "docs left out"
    );

    let applets = cpio::parse(&bb.archive().to_bytes()).unwrap();
    for a in ["bin/sh", "sbin/insmod", "bin/mount", "sbin/poweroff"] {
        let e = applets
            .iter()
            .find(|e| e.name == a)
            .unwrap_or_else(|| panic!("{a}"));
        assert_eq!(e.mode & 0o170000, cpio::S_IFLNK, "{a}");
        assert_eq!(e.data, b"/bin/busybox");
    }

    let err = i
        .package(&kit, "busybox-static", &["no/such/file"])
        .unwrap_err();
    assert!(err.to_string().contains("has no no/such/file"), "{err}");
}

#[test]
fn kernel_image_modules_and_vmlinux() {
    let kit = Kit::new(Kit::default_cache_dir()).expect("cache");
    let k = kit.kernel().expect("kernel");
    assert!(k.package.starts_with("linux-image-") && k.package.ends_with(&k.version));
    // the set the feasibility notes found for vfio-pci + type1
    let mods = k.resolve(&["vfio-pci", "vfio_iommu_type1"]).unwrap();
    let names: Vec<String> = mods
        .iter()
        .map(|p| guest_kit::modules::name_of(&p.to_string_lossy()))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "irqbypass",
            "vfio",
            "vfio_iommu_type1",
            "vfio_pci",
            "vfio_pci_core",
            "vfio_virqfd"
        ]
    );
    assert_eq!(names[0], "vfio");
    assert!(mods.iter().all(|p| p.exists()));
    let elf = std::fs::read(&k.vmlinux).unwrap();
    assert!(elf.starts_with(b"\x7fELF\x02"), "64-bit ELF");
    // Xen's ELF note name, which carries the PVH entry point QEMU boots through
    assert!(elf.windows(4).any(|w| w == b"Xen\0"), "PVH note");
}
