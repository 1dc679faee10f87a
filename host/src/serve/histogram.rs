//! A histogram of observations in fixed buckets, and the buckets of step
//! durations. A leaf: the journal scan (`scan`) fills histograms and the
//! exposition (`metrics`) writes them, neither through the other.

/// Observations in fixed buckets (upper bounds, ascending).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative; one more than `bounds` (the `+Inf` one).
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0 }
    }

    /// Record `v`.
    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The buckets' upper bounds, ascending (the `+Inf` one not included).
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Observations per bucket, not cumulative; the last is the `+Inf` bucket.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// Step durations, seconds: from a lock to a VM build.
pub const STEP_BUCKETS: &[f64] =
    &[0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];
