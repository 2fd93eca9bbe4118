//! A writer of `newc` cpio archives (the format the kernel unpacks as an initramfs).
//!
//! Each entry is a 110-byte ASCII header (`070701`, then 13 fields of 8 hex digits), the NUL
//! terminated name padded to a multiple of 4, then the data padded to a multiple of 4. The
//! archive ends with the entry `TRAILER!!!`. See the kernel's
//! `Documentation/driver-api/early-userspace/buffer-format.rst`.

use std::collections::BTreeSet;
use std::io::{self, Write};

/// File type bits of `mode` (`S_IFMT` values).
pub const S_IFREG: u32 = 0o100000;
/// Directory.
pub const S_IFDIR: u32 = 0o040000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120000;
/// Character device.
pub const S_IFCHR: u32 = 0o020000;

/// What an entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file with its contents.
    File(Vec<u8>),
    /// A directory.
    Dir,
    /// A symbolic link to the target.
    Symlink(String),
    /// A character device node (major, minor).
    CharDev(u32, u32),
}

/// One archive member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive, without a leading `/` (`bin/busybox`).
    pub path: String,
    /// Permission bits (`0o755`); the type bits come from `kind`.
    pub perm: u32,
    /// The member.
    pub kind: Kind,
}

/// An in-memory newc archive under construction. Parent directories are added on demand, and
/// a path added twice keeps the last version.
#[derive(Clone, Debug, Default)]
pub struct Archive {
    entries: Vec<Entry>,
    dirs: BTreeSet<String>,
}

fn normalize(path: &str) -> String {
    path.trim_start_matches('/')
        .trim_end_matches('/')
        .to_string()
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Archive {
        Archive::default()
    }

    fn parents(&mut self, path: &str) {
        let mut acc = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for p in &parts[..parts.len().saturating_sub(1)] {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(p);
            if self.dirs.insert(acc.clone()) {
                self.entries.push(Entry {
                    path: acc.clone(),
                    perm: 0o755,
                    kind: Kind::Dir,
                });
            }
        }
    }

    /// Adds an entry (and its missing parent directories).
    pub fn add(&mut self, path: &str, perm: u32, kind: Kind) {
        let path = normalize(path);
        if path.is_empty() {
            return;
        }
        self.parents(&path);
        if matches!(kind, Kind::Dir) {
            if self.dirs.insert(path.clone()) {
                self.entries.push(Entry { path, perm, kind });
            }
            return;
        }
        self.entries.retain(|e| e.path != path);
        self.entries.push(Entry { path, perm, kind });
    }

    /// Adds a regular file.
    pub fn file(&mut self, path: &str, perm: u32, data: Vec<u8>) {
        self.add(path, perm, Kind::File(data));
    }

    /// Adds a directory.
    pub fn dir(&mut self, path: &str) {
        self.add(path, 0o755, Kind::Dir);
    }

    /// Adds a symbolic link `path` -> `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.add(path, 0o777, Kind::Symlink(target.to_string()));
    }

    /// Adds a character device node.
    pub fn char_dev(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.add(path, perm, Kind::CharDev(major, minor));
    }

    /// The entries in archive order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Whether `path` is in the archive.
    pub fn contains(&self, path: &str) -> bool {
        let path = normalize(path);
        self.entries.iter().any(|e| e.path == path)
    }

    /// Writes the archive (with its trailer).
    pub fn write_to(&self, mut w: impl Write) -> io::Result<()> {
        let mut off = 0usize;
        for (i, e) in self.entries.iter().enumerate() {
            let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match &e.kind {
                Kind::File(d) => (S_IFREG | e.perm, d, (0, 0)),
                Kind::Dir => (S_IFDIR | e.perm, &[], (0, 0)),
                Kind::Symlink(t) => (S_IFLNK | e.perm, t.as_bytes(), (0, 0)),
                Kind::CharDev(ma, mi) => (S_IFCHR | e.perm, &[], (*ma, *mi)),
            };
            let nlink = if matches!(e.kind, Kind::Dir) { 2 } else { 1 };
            off += write_member(&mut w, i as u32 + 1, mode, nlink, rdev, &e.path, data)?;
        }
        off += write_member(&mut w, 0, 0, 1, (0, 0), "TRAILER!!!", &[])?;
        // The kernel does not need it, but cpio tools expect 512-byte blocks.
        let pad = (512 - off % 512) % 512;
        w.write_all(&vec![0u8; pad])
    }

    /// The archive as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }
}

fn pad4(w: &mut impl Write, n: usize) -> io::Result<usize> {
    let p = (4 - n % 4) % 4;
    w.write_all(&[0u8; 3][..p])?;
    Ok(p)
}

/// Writes one member; returns the bytes written.
fn write_member(
    w: &mut impl Write,
    ino: u32,
    mode: u32,
    nlink: u32,
    rdev: (u32, u32),
    name: &str,
    data: &[u8],
) -> io::Result<usize> {
    let namesize = name.len() + 1;
    let header = format!(
        "070701{ino:08x}{mode:08x}{uid:08x}{gid:08x}{nlink:08x}{mtime:08x}{size:08x}\
         {devmaj:08x}{devmin:08x}{rmaj:08x}{rmin:08x}{namesize:08x}{check:08x}",
        uid = 0,
        gid = 0,
        mtime = 0,
        size = data.len(),
        devmaj = 0,
        devmin = 0,
        rmaj = rdev.0,
        rmin = rdev.1,
        check = 0,
    );
    debug_assert_eq!(header.len(), 110);
    w.write_all(header.as_bytes())?;
    w.write_all(name.as_bytes())?;
    w.write_all(&[0])?;
    let mut n = 110 + namesize;
    n += pad4(w, n)?;
    w.write_all(data)?;
    n += data.len();
    n += pad4(w, n)?;
    Ok(n)
}

/// One member read back by [`parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Name.
    pub name: String,
    /// Mode (type and permission bits).
    pub mode: u32,
    /// Device number of a node.
    pub rdev: (u32, u32),
    /// Contents.
    pub data: Vec<u8>,
}

/// Reads a newc archive back (up to its trailer): for tests and checks.
pub fn parse(mut b: &[u8]) -> Result<Vec<Parsed>, String> {
    let start = b.len();
    let mut out = Vec::new();
    loop {
        let at = start - b.len();
        if b.len() < 110 {
            return Err(format!("truncated header at {at}"));
        }
        let hdr =
            std::str::from_utf8(&b[..110]).map_err(|_| format!("non-ASCII header at {at}"))?;
        if &hdr[..6] != "070701" {
            return Err(format!("bad magic {:?} at {at}", &hdr[..6]));
        }
        let field = |i: usize| {
            u32::from_str_radix(&hdr[6 + 8 * i..14 + 8 * i], 16)
                .map_err(|_| format!("bad field {i} at {at}"))
        };
        let mode = field(1)?;
        let size = field(6)? as usize;
        let rdev = (field(9)?, field(10)?);
        let namesize = field(11)? as usize;
        let name_end = 110 + namesize;
        let data_start = name_end.div_ceil(4) * 4;
        let data_end = data_start + size;
        if namesize == 0 || b.len() < data_end {
            return Err(format!("truncated member at {at}"));
        }
        let name = String::from_utf8_lossy(&b[110..name_end - 1]).into_owned();
        if b[name_end - 1] != 0 {
            return Err(format!("name not NUL-terminated at {at}"));
        }
        if name == "TRAILER!!!" {
            return Ok(out);
        }
        out.push(Parsed {
            name,
            mode,
            rdev,
            data: b[data_start..data_end].to_vec(),
        });
        b = &b[(data_end.div_ceil(4) * 4).min(b.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_newc() {
        let mut a = Archive::new();
        a.file("init", 0o755, b"#!/bin/sh\n".to_vec());
        let b = a.to_bytes();
        // magic, ino 1, mode 0100755, uid, gid, nlink 1, mtime, size 10, 4 dev fields,
        // namesize 5 ("init\0"), check
        let expect = String::from("07070100000001000081ed000000000000000000000001000000000000000a")
            + "00000000000000000000000000000000"
            + "00000005"
            + "00000000";
        assert_eq!(&b[..110], expect.as_bytes());
        assert_eq!(&b[110..115], b"init\0");
        // 115 rounds up to 116: the data starts 4-aligned
        assert_eq!(&b[115..116], &[0]);
        assert_eq!(&b[116..126], b"#!/bin/sh\n");
        assert_eq!(b.len() % 512, 0);
        let trailer = b"TRAILER!!!\0";
        let t = b.windows(trailer.len()).position(|w| w == trailer).unwrap();
        assert_eq!((t - 110) % 4, 0);
    }

    #[test]
    fn round_trip_with_parents_nodes_links() {
        let mut a = Archive::new();
        a.file("/bin/busybox", 0o755, vec![1, 2, 3]);
        a.symlink("bin/sh", "busybox");
        a.char_dev("dev/console", 0o600, 5, 1);
        a.file("mods/a.ko", 0o644, vec![7; 5]);
        a.file("mods/a.ko", 0o644, vec![8; 6]); // replaced
        a.dir("proc");
        let p = parse(&a.to_bytes()).unwrap();
        let names: Vec<&str> = p.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/busybox",
                "bin/sh",
                "dev",
                "dev/console",
                "mods",
                "mods/a.ko",
                "proc"
            ]
        );
        assert_eq!(p[0].mode, S_IFDIR | 0o755);
        assert_eq!(p[1].data, vec![1, 2, 3]);
        assert_eq!(p[2].mode, S_IFLNK | 0o777);
        assert_eq!(p[2].data, b"busybox");
        assert_eq!(p[4].mode, S_IFCHR | 0o600);
        assert_eq!(p[4].rdev, (5, 1));
        assert_eq!(p[6].data, vec![8; 6]);
        assert!(a.contains("/dev/console"));
        assert!(!a.contains("dev/null"));
    }

    #[test]
    fn every_name_length_pads_correctly() {
        for n in 1..9 {
            for len in 0..9 {
                let mut a = Archive::new();
                let name = "x".repeat(n);
                a.file(&name, 0o644, vec![0xab; len]);
                let p = parse(&a.to_bytes()).unwrap();
                assert_eq!(p.len(), 1);
                assert_eq!(p[0].name, name);
                assert_eq!(p[0].data, vec![0xab; len]);
            }
        }
    }

    #[test]
    fn parse_rejects_garbage() {
        assert!(parse(b"070702").is_err());
        let mut b = Archive::new().to_bytes();
        b[0] = b'1';
        assert!(parse(&b).unwrap_err().contains("magic"));
    }
}
