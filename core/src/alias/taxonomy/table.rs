//! [`Table`]: the lookup tables of a [`super::Taxonomy`], keyed by configured
//! names and looked up by bytes.

use std::collections::HashMap;

/// A lookup table keyed by configured names, looked up by bytes: the text
/// patterns ask about words of a body without reading them as UTF-8 first.
/// Fx hashing: fast on short keys and needs no random seed (wasm hosts may not
/// offer one); the keys come from configuration, not from traffic.
#[derive(Clone)]
pub(super) struct Table<V>(pub(super) HashMap<Box<[u8]>, V, rustc_hash::FxBuildHasher>);

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table(HashMap::default())
    }
}

impl<V> FromIterator<(String, V)> for Table<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(pairs: I) -> Self {
        let mut t = Table::default();
        for (k, v) in pairs {
            t.insert(k, v);
        }
        t
    }
}

impl<V> Table<V> {
    pub(super) fn get(&self, key: impl AsRef<[u8]>) -> Option<&V> {
        self.0.get(key.as_ref())
    }
    pub(super) fn insert(&mut self, key: String, value: V) -> Option<V> {
        self.0.insert(key.into_bytes().into_boxed_slice(), value)
    }
    pub(super) fn entry(
        &mut self,
        key: String,
    ) -> std::collections::hash_map::Entry<'_, Box<[u8]>, V> {
        self.0.entry(key.into_bytes().into_boxed_slice())
    }
    /// The keys (inserted as `String`s, so always text).
    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().filter_map(|k| std::str::from_utf8(k).ok())
    }
}
