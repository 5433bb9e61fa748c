//! A turn's canonical text, and the bounded cache of query vectors kept by it.
//!
//! One user turn reaches the LLM several times (planner, agent call,
//! formatter), and clients re-send it with other spacing or another Unicode
//! spelling of the same letters. The cache key is the canonical text, and the
//! canonical text is what the embedder is sent, so a key always names the
//! vector of its own text.

use super::Key;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use unicode_normalization::UnicodeNormalization;

/// The canonical form of a turn: NFKC (what e5's tokenizer normalises to
/// anyway, so the vector does not change), each run of whitespace one
/// space, no leading or trailing whitespace.
///
/// ```
/// use keyhole_control::embed::query::canonical;
/// assert_eq!(canonical("  Order a\u{a0}lipid\n\tpanel "), "Order a lipid panel");
/// assert_eq!(canonical("Mu\u{308}ller"), "Müller");
/// ```
pub fn canonical(text: &str) -> String {
    // Most turns are NFKC already (ASCII always is): the quick check skips
    // the copy.
    let normal: std::borrow::Cow<'_, str> = match unicode_normalization::is_nfkc_quick(text.chars())
    {
        unicode_normalization::IsNormalized::Yes => text.into(),
        _ => text.nfkc().collect::<String>().into(),
    };
    let mut out = String::with_capacity(normal.len());
    for word in normal.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Query vectors by key, at most `capacity` of them: the least recently used
/// is evicted first.
pub(crate) struct QueryCache {
    /// Vector and last use.
    entries: HashMap<Key, (Arc<[f32]>, u64)>,
    /// Keys by last use, oldest first.
    by_use: BTreeMap<u64, Key>,
    tick: u64,
    capacity: usize,
}

impl QueryCache {
    /// An empty cache of at most `capacity` vectors (at least one).
    pub(crate) fn new(capacity: usize) -> QueryCache {
        QueryCache {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    /// The vector of `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &Key) -> Option<Arc<[f32]>> {
        self.tick += 1;
        let (v, used) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        *used = self.tick;
        self.by_use.insert(self.tick, *key);
        Some(v.clone())
    }

    /// Whether `key` is cached (its place in the order is left alone).
    pub(crate) fn contains(&self, key: &Key) -> bool {
        self.entries.contains_key(key)
    }

    /// Keeps `vector` for `key`, evicting the least recently used past the capacity.
    pub(crate) fn insert(&mut self, key: Key, vector: Arc<[f32]>) {
        self.tick += 1;
        if let Some((_, used)) = self.entries.insert(key, (vector, self.tick)) {
            self.by_use.remove(&used);
        }
        self.by_use.insert(self.tick, key);
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    /// How many vectors are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}
