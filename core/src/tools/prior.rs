//! A bounded memory of each session's last audited candidate set.
//!
//! The filter keeps one per worker so that a control outage can still be
//! answered with tools the session was already shown. Bounded in sessions and
//! in names per session; the least recently used session is evicted first.

use std::collections::VecDeque;

/// Sessions → last audited set (of names, or of [`crate::proto::tools::SurfacedTool`]s
/// with their metadata), at most `capacity` sessions.
#[derive(Debug, Clone)]
pub struct PriorSets<T = String> {
    capacity: usize,
    max_names: usize,
    /// Most recently used at the back.
    entries: VecDeque<(String, Vec<T>)>,
}

impl<T> PriorSets<T> {
    /// A memory of at most `capacity` sessions, each at most `max_names` names.
    pub fn new(capacity: usize, max_names: usize) -> Self {
        PriorSets {
            capacity,
            max_names,
            entries: VecDeque::new(),
        }
    }

    /// Records the set surfaced for `session` (only after a successful retrieval).
    pub fn remember(&mut self, session: &str, names: impl IntoIterator<Item = T>) {
        if self.capacity == 0 {
            return;
        }
        self.entries.retain(|(s, _)| s != session);
        if self.entries.len() >= self.capacity {
            self.entries.pop_front();
        }
        let names: Vec<T> = names.into_iter().take(self.max_names).collect();
        self.entries.push_back((session.to_owned(), names));
    }

    /// The session's last set, or an empty slice.
    pub fn get(&self, session: &str) -> &[T] {
        self.entries
            .iter()
            .find(|(s, _)| s == session)
            .map(|(_, names)| names.as_slice())
            .unwrap_or(&[])
    }

    /// Number of sessions remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_written_session() {
        let mut p: PriorSets = PriorSets::new(2, 12);
        p.remember("a", vec!["x".into()]);
        p.remember("b", vec!["y".into()]);
        p.remember("a", vec!["z".into()]);
        p.remember("c", vec!["w".into()]);
        assert_eq!(p.len(), 2);
        assert!(p.get("b").is_empty(), "b was least recent");
        assert_eq!(p.get("a"), ["z".to_owned()]);
    }

    #[test]
    fn caps_names_per_session() {
        let mut p: PriorSets = PriorSets::new(4, 3);
        p.remember("s", (0..10).map(|i| i.to_string()));
        assert_eq!(p.get("s").len(), 3);
    }
}
