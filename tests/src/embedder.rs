//! A local OpenAI-compatible embedder for tests whose subject is not the
//! embedder: it answers at once with hashed bags of words (384 dimensions), so
//! cosine still follows word overlap, and it can refuse its first requests.
//! The shared embedder (one inference at a time on a busy box) would make
//! those tests' timing depend on everything else running. It is
//! `keyhole_testkit::embedder`, which control's own tests use too.

use keyhole_testkit::embedder::{bag_of_words, FakeEmbedder, Options, Vectors};

/// Dimensions of every vector.
pub const DIMENSIONS: usize = 384;

/// The embedding of `text`: word counts hashed into [`DIMENSIONS`] buckets,
/// never the zero vector.
pub fn vector(text: &str) -> Vec<f32> {
    bag_of_words(text, DIMENSIONS)
}

/// Starts the embedder on a free loopback port; it answers 503 to its first
/// `failures` requests. Serves until the test ends. Returns its base URL.
pub async fn start(failures: usize) -> String {
    FakeEmbedder::start(Options {
        vectors: Vectors::BagOfWords,
        dim: DIMENSIONS,
        refuse_first: failures,
    })
    .await
    .expect("starting the fake embedder")
    .url
}
