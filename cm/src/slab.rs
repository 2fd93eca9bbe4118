//! A generational slab: keys of removed entries never name a later entry.

use alloc::vec::Vec;

/// A slab key: index and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    idx: u32,
    generation: u32,
}

impl Key {
    /// The key as one number (for handles users compare).
    pub(crate) const fn raw(self) -> u64 {
        (self.generation as u64) << 32 | self.idx as u64
    }
}

struct Entry<T> {
    generation: u32,
    val: Option<T>,
}

/// Values addressed by [`Key`].
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, val: T) -> Key {
        self.len += 1;
        if let Some(idx) = self.free.pop() {
            let e = &mut self.entries[idx as usize];
            e.generation = e.generation.wrapping_add(1);
            e.val = Some(val);
            return Key {
                idx,
                generation: e.generation,
            };
        }
        let idx = self.entries.len() as u32;
        self.entries.push(Entry {
            generation: 0,
            val: Some(val),
        });
        Key { idx, generation: 0 }
    }

    pub(crate) fn get(&self, k: Key) -> Option<&T> {
        let e = self.entries.get(k.idx as usize)?;
        if e.generation != k.generation {
            return None;
        }
        e.val.as_ref()
    }

    pub(crate) fn get_mut(&mut self, k: Key) -> Option<&mut T> {
        let e = self.entries.get_mut(k.idx as usize)?;
        if e.generation != k.generation {
            return None;
        }
        e.val.as_mut()
    }

    pub(crate) fn contains(&self, k: Key) -> bool {
        self.get(k).is_some()
    }

    pub(crate) fn remove(&mut self, k: Key) -> Option<T> {
        let e = self.entries.get_mut(k.idx as usize)?;
        if e.generation != k.generation {
            return None;
        }
        let v = e.val.take()?;
        self.free.push(k.idx);
        self.len -= 1;
        Some(v)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.val.as_ref().map(|v| {
                (
                    Key {
                        idx: i as u32,
                        generation: e.generation,
                    },
                    v,
                )
            })
        })
    }

    pub(crate) fn keys(&self) -> Vec<Key> {
        self.iter().map(|(k, _)| k).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut s = Slab::default();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
        assert_eq!(s.keys(), [b]);
    }
}
