//! Maps and sets keyed by hashes already computed (DataFusion's `create_hashes`): the hashes
//! are well mixed, so the table uses them as they are instead of hashing them again.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

/// A map from precomputed key hashes.
pub type PrehashedMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// A set of precomputed key hashes.
pub type PrehashedSet = HashSet<u64, BuildHasherDefault<IdentityHasher>>;

/// A hasher that passes a `u64` through.
#[derive(Debug, Default)]
pub struct IdentityHasher(u64);

impl std::hash::Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ byte as u64;
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}
