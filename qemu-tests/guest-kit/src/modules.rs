//! `modules.dep` parsing and dependency resolution (what `modprobe` does to find the files to
//! load, and in which order).
//!
//! A line is `path/to/mod.ko: dep1.ko dep2.ko ...` with paths relative to
//! `/lib/modules/<version>/`; each line lists the module's full dependency set. A module's
//! name is its file name without `.ko` (or `.ko.xz` etc.), with `-` and `_` equivalent.

use std::collections::{BTreeMap, BTreeSet};

/// A parsed `modules.dep`.
#[derive(Clone, Debug, Default)]
pub struct ModulesDep {
    /// Normalized name -> (path, dependency paths).
    by_name: BTreeMap<String, (String, Vec<String>)>,
    /// Path -> normalized name.
    by_path: BTreeMap<String, String>,
}

/// A module's normalized name: `vfio-pci` and `vfio_pci` are the same module.
pub fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// The module name of a path in modules.dep (`kernel/drivers/vfio/pci/vfio-pci.ko` ->
/// `vfio_pci`).
pub fn name_of(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = match file.find(".ko") {
        Some(i) => &file[..i],
        None => file,
    };
    normalize(stem)
}

impl ModulesDep {
    /// Parses the text of a `modules.dep`. Malformed lines are an error naming the line.
    pub fn parse(text: &str) -> Result<ModulesDep, String> {
        let mut m = ModulesDep::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((path, deps)) = line.split_once(':') else {
                return Err(format!("modules.dep line {}: no ':' in {line:?}", i + 1));
            };
            let path = path.trim().to_string();
            if path.is_empty() {
                return Err(format!("modules.dep line {}: empty module path", i + 1));
            }
            let deps: Vec<String> = deps.split_whitespace().map(str::to_string).collect();
            let name = name_of(&path);
            m.by_path.insert(path.clone(), name.clone());
            m.by_name.insert(name, (path, deps));
        }
        Ok(m)
    }

    /// Number of modules.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The path of module `name` (`-`/`_` either way).
    pub fn path(&self, name: &str) -> Option<&str> {
        self.by_name.get(&normalize(name)).map(|(p, _)| p.as_str())
    }

    /// The paths to load for `names`, dependencies first, each once, in an order in which
    /// every module comes after everything it depends on. Unknown names (and dependencies
    /// that have no line of their own) are an error naming them; a cycle is an error too.
    pub fn resolve(&self, names: &[&str]) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        let mut done = BTreeSet::new();
        let mut active = BTreeSet::new();
        for n in names {
            let key = normalize(n);
            if !self.by_name.contains_key(&key) {
                return Err(format!("module {n:?} is not in modules.dep"));
            }
            self.visit(&key, &mut done, &mut active, &mut out)?;
        }
        Ok(out)
    }

    fn visit(
        &self,
        name: &str,
        done: &mut BTreeSet<String>,
        active: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) -> Result<(), String> {
        if done.contains(name) {
            return Ok(());
        }
        if !active.insert(name.to_string()) {
            return Err(format!("dependency cycle through module {name:?}"));
        }
        let (path, deps) = &self.by_name[name];
        // The line lists the whole dependency set; the most basic modules are last (as
        // depmod writes it), so walk it from the end for a stable, natural order.
        for d in deps.iter().rev() {
            let Some(dn) = self.by_path.get(d) else {
                return Err(format!(
                    "module {name:?} depends on {d:?}, which has no line in modules.dep"
                ));
            };
            self.visit(&dn.clone(), done, active, out)?;
        }
        active.remove(name);
        done.insert(name.to_string());
        out.push(path.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/vfio/vfio.ko:
kernel/drivers/vfio/vfio_iommu_type1.ko: kernel/drivers/vfio/vfio.ko
kernel/virt/lib/irqbypass.ko:
kernel/drivers/vfio/vfio_virqfd.ko:
kernel/drivers/vfio/pci/vfio-pci-core.ko: kernel/drivers/vfio/vfio_virqfd.ko kernel/virt/lib/irqbypass.ko kernel/drivers/vfio/vfio.ko
kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/pci/vfio-pci-core.ko kernel/drivers/vfio/vfio_virqfd.ko kernel/virt/lib/irqbypass.ko kernel/drivers/vfio/vfio.ko
kernel/drivers/net/dummy.ko.xz:
";

    #[test]
    fn names_normalize() {
        assert_eq!(name_of("kernel/drivers/vfio/pci/vfio-pci.ko"), "vfio_pci");
        assert_eq!(name_of("kernel/drivers/net/dummy.ko.xz"), "dummy");
        assert_eq!(normalize("vfio-pci-core"), "vfio_pci_core");
    }

    #[test]
    fn transitive_dependencies_in_load_order() {
        let m = ModulesDep::parse(DEP).unwrap();
        assert_eq!(m.len(), 7);
        let r = m.resolve(&["vfio-pci", "vfio_iommu_type1"]).unwrap();
        let names: Vec<String> = r.iter().map(|p| name_of(p)).collect();
        assert_eq!(
            names,
            [
                "vfio",
                "irqbypass",
                "vfio_virqfd",
                "vfio_pci_core",
                "vfio_pci",
                "vfio_iommu_type1"
            ]
        );
        // every module after all of its dependencies
        for (i, p) in r.iter().enumerate() {
            let (_, deps) = &m.by_name[&name_of(p)];
            for d in deps {
                let j = r.iter().position(|x| x == d).unwrap();
                assert!(j < i, "{d} must load before {p}");
            }
        }
        // each once, whatever the request order or repetition
        let r2 = m.resolve(&["vfio", "vfio_pci", "vfio-pci"]).unwrap();
        assert_eq!(r2.len(), 5);
        assert_eq!(m.path("dummy"), Some("kernel/drivers/net/dummy.ko.xz"));
    }

    #[test]
    fn errors_name_the_problem() {
        let m = ModulesDep::parse(DEP).unwrap();
        assert!(m.resolve(&["nope"]).unwrap_err().contains("\"nope\""));
        let m = ModulesDep::parse("a.ko: b.ko\n").unwrap();
        assert!(m.resolve(&["a"]).unwrap_err().contains("b.ko"));
        let m = ModulesDep::parse("a.ko: b.ko\nb.ko: a.ko\n").unwrap();
        assert!(m.resolve(&["a"]).unwrap_err().contains("cycle"));
        assert!(
            ModulesDep::parse("garbage line\n")
                .unwrap_err()
                .contains("line 1")
        );
    }
}
