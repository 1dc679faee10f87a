//! `GET /metrics`: the Prometheus text exposition format (0.0.4) of what the
//! runs' journals say and what the listener saw (docs/SERVE.md, "Metrics").
//!
//! Contract:
//! - [`Exposition`] writes each family once (`# HELP`, `# TYPE`, then its
//!   samples); label values and help text are escaped as the format says
//!   (`\\`, `\"`, `\n`), so a step or plugin name cannot break a line or forge
//!   a sample; histograms are cumulative, end with `le="+Inf"`, and their
//!   `_count` equals that bucket;
//! - the run counters are the journals' ([`super::scan`]): the same lines
//!   `cradle runs` reads, counted once each; the delivery counters are the
//!   listener's own ([`Deliveries`]), from this process's start;
//! - nothing served is a secret: journal strings are redacted when written,
//!   and the access token is never part of a sample.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::histogram::Histogram;
use super::scan::Totals;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (names end in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in cumulative buckets, with `_sum` and `_count`.
    Histogram,
}

/// Escape a label value: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escape help text: `\` → `\\`, newline → `\n`.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A float as the format writes it (`+Inf`, `-Inf`, `NaN`).
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// The text of one scrape.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Start family `name` (the base name: a counter's ends in `_total`).
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample of the current family.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", float(value));
    }

    /// The samples of histogram `name` with `labels`: cumulative buckets up to
    /// `+Inf`, `_sum`, `_count`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let mut cumulative = 0u64;
        let bucket = format!("{name}_bucket");
        for (i, n) in h.counts().iter().enumerate() {
            cumulative += n;
            let le = h.bounds().get(i).map_or_else(|| "+Inf".to_string(), |b| float(*b));
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, cumulative as f64);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum());
        self.sample(&format!("{name}_count"), labels, cumulative as f64);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// What the listener answered a delivery to a source (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Recorded; a pipeline will run (`202`).
    Accepted,
    /// The VM already has an event in flight (`202`, nothing new).
    InFlight,
    /// The exact body was recorded before (`200`).
    Duplicate,
    /// Nothing to start: not a VM changed to staged (`200`).
    Ignored,
    /// Over the request rate (`429`).
    RateLimited,
    /// Not POST (`405`).
    MethodNotAllowed,
    /// Over `max_body_bytes` (`413`).
    TooLarge,
    /// The body was not sent in time (`408`).
    Timeout,
    /// Missing, malformed or wrong signature (`401`).
    Unauthorized,
    /// Not a payload cradle reads, or an unreadable body (`400`).
    BadPayload,
    /// The queue is full (`503`).
    QueueFull,
    /// The event could not be written (`503`).
    StoreError,
}

impl Delivery {
    const ALL: [Delivery; 12] = [
        Delivery::Accepted,
        Delivery::InFlight,
        Delivery::Duplicate,
        Delivery::Ignored,
        Delivery::RateLimited,
        Delivery::MethodNotAllowed,
        Delivery::TooLarge,
        Delivery::Timeout,
        Delivery::Unauthorized,
        Delivery::BadPayload,
        Delivery::QueueFull,
        Delivery::StoreError,
    ];

    /// The `result` label value.
    pub fn label(self) -> &'static str {
        match self {
            Delivery::Accepted => "accepted",
            Delivery::InFlight => "in_flight",
            Delivery::Duplicate => "duplicate",
            Delivery::Ignored => "ignored",
            Delivery::RateLimited => "rate_limited",
            Delivery::MethodNotAllowed => "method_not_allowed",
            Delivery::TooLarge => "too_large",
            Delivery::Timeout => "timeout",
            Delivery::Unauthorized => "unauthorized",
            Delivery::BadPayload => "bad_payload",
            Delivery::QueueFull => "queue_full",
            Delivery::StoreError => "store_error",
        }
    }

    /// Whether the delivery was refused (an error status).
    pub fn refused(self) -> bool {
        !matches!(self, Delivery::Accepted | Delivery::InFlight | Delivery::Duplicate | Delivery::Ignored)
    }
}

/// The listener's delivery counters, by source and result: one atomic add
/// per request, no lock.
#[derive(Debug)]
pub struct Deliveries {
    by_source: BTreeMap<String, [AtomicU64; 12]>,
}

impl Deliveries {
    /// Zeroed counters for `sources`.
    pub fn new<'a>(sources: impl IntoIterator<Item = &'a String>) -> Deliveries {
        Deliveries { by_source: sources.into_iter().map(|s| (s.clone(), Default::default())).collect() }
    }

    /// Count one delivery to `source` (a configured source; others are not
    /// deliveries and are not counted).
    pub fn count(&self, source: &str, what: Delivery) {
        if let Some(c) = self.by_source.get(source) {
            c[what as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn write(&self, out: &mut Exposition) {
        out.family(
            "cradle_webhook_deliveries_total",
            Kind::Counter,
            "Webhook deliveries by source and answer (accepted, in_flight, duplicate, ignored, or the reason it was refused), since this process started.",
        );
        for (source, counts) in &self.by_source {
            for what in Delivery::ALL {
                let n = counts[what as usize].load(Ordering::Relaxed);
                let refused = if what.refused() { "true" } else { "false" };
                out.sample(
                    "cradle_webhook_deliveries_total",
                    &[("source", source), ("result", what.label()), ("refused", refused)],
                    n as f64,
                );
            }
        }
    }
}

/// The queue's state at a scrape.
#[derive(Debug, Clone, Copy)]
pub struct Queue {
    /// Events accepted or running.
    pub depth: usize,
    /// `max_queued`.
    pub limit: usize,
}

/// One scrape: the journals' totals, the listener's counters, the queue.
pub fn render(totals: &Totals, deliveries: &Deliveries, queue: Queue) -> String {
    let mut out = Exposition::default();
    out.family(
        "cradle_runs_total",
        Kind::Counter,
        "Runs ended, by result (succeeded, failed, interrupted), backend, environment, and what the run did: its workflow and function (maintain/apply_vm is a maintenance change, provision/provision a provision), from the run journals.",
    );
    for (k, n) in &totals.runs {
        out.sample(
            "cradle_runs_total",
            &[
                ("result", &k.result),
                ("backend", &k.backend),
                ("environment", &k.environment),
                ("workflow", &k.workflow),
                ("function", &k.function),
            ],
            *n as f64,
        );
    }
    out.family(
        "cradle_steps_total",
        Kind::Counter,
        "Workflow steps ended, by step name and result (ok, failed), from the run journals.",
    );
    for ((step, result), n) in &totals.steps {
        out.sample("cradle_steps_total", &[("step", step), ("result", result)], *n as f64);
    }
    out.family(
        "cradle_step_duration_seconds",
        Kind::Histogram,
        "How long workflow steps took, by step name, from the run journals.",
    );
    for (step, h) in &totals.step_durations {
        out.histogram("cradle_step_duration_seconds", &[("step", step)], h);
    }
    out.family(
        "cradle_capability_calls_total",
        Kind::Counter,
        "Capability calls by capability, caller (a plugin or workflow) and result (ok, failed, denied), from the run journals.",
    );
    for ((cap, caller, result), n) in &totals.calls {
        out.sample(
            "cradle_capability_calls_total",
            &[("capability", cap), ("caller", caller), ("result", result)],
            *n as f64,
        );
    }
    out.family(
        "cradle_plugin_traps_total",
        Kind::Counter,
        "Plugin calls that trapped (a panic, a limit, a malformed value), by plugin, as the run journals' step errors report them.",
    );
    for (plugin, n) in &totals.traps {
        out.sample("cradle_plugin_traps_total", &[("plugin", plugin)], *n as f64);
    }
    out.family(
        "cradle_journal_lines_unreadable_total",
        Kind::Counter,
        "Complete journal lines that are not valid events (skipped).",
    );
    out.sample("cradle_journal_lines_unreadable_total", &[], totals.unreadable_lines as f64);
    out.family("cradle_journals_read", Kind::Gauge, "Run journals in the runs directory at the last scrape.");
    out.sample("cradle_journals_read", &[], totals.journals as f64);
    deliveries.write(&mut out);
    out.family("cradle_webhook_queue_depth", Kind::Gauge, "Webhook events accepted or running.");
    out.sample("cradle_webhook_queue_depth", &[], queue.depth as f64);
    out.family("cradle_webhook_queue_limit", Kind::Gauge, "serve.max_queued: beyond it deliveries get 503.");
    out.sample("cradle_webhook_queue_limit", &[], queue.limit as f64);
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped_so_no_line_or_sample_can_be_forged() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        let mut out = Exposition::default();
        out.family("t_total", Kind::Counter, "line one\nline \\ two");
        out.sample("t_total", &[("step", "evil\"} 1\nforged_total 9\n")], 1.0);
        let text = out.finish();
        assert_eq!(
            text,
            "# HELP t_total line one\\nline \\\\ two\n# TYPE t_total counter\nt_total{step=\"evil\\\"} 1\\nforged_total 9\\n\"} 1\n"
        );
        assert_eq!(text.lines().count(), 3, "one sample line: {text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf_equal_to_count() {
        static B: &[f64] = &[0.5, 1.0, 5.0];
        let mut h = Histogram::new(B);
        for v in [0.25, 0.5, 0.75, 3.0, 99.0] {
            h.observe(v);
        }
        let mut out = Exposition::default();
        out.family("d_seconds", Kind::Histogram, "d");
        out.histogram("d_seconds", &[("step", "make")], &h);
        let text = out.finish();
        let want = "d_seconds_bucket{step=\"make\",le=\"0.5\"} 2\n\
                    d_seconds_bucket{step=\"make\",le=\"1\"} 3\n\
                    d_seconds_bucket{step=\"make\",le=\"5\"} 4\n\
                    d_seconds_bucket{step=\"make\",le=\"+Inf\"} 5\n\
                    d_seconds_sum{step=\"make\"} 103.5\n\
                    d_seconds_count{step=\"make\"} 5\n";
        assert!(text.ends_with(want), "{text}");
        assert_eq!(h.count(), 5);
    }

    #[test]
    fn deliveries_are_counted_per_source_and_others_ignored() {
        let sources = ["netbox".to_string()];
        let d = Deliveries::new(&sources);
        d.count("netbox", Delivery::Accepted);
        d.count("netbox", Delivery::Unauthorized);
        d.count("netbox", Delivery::Unauthorized);
        d.count("other", Delivery::Accepted);
        let text = render(&Totals::default(), &d, Queue { depth: 3, limit: 10 });
        assert!(
            text.contains(
                "cradle_webhook_deliveries_total{source=\"netbox\",result=\"unauthorized\",refused=\"true\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "cradle_webhook_deliveries_total{source=\"netbox\",result=\"accepted\",refused=\"false\"} 1\n"
            )
        );
        assert!(!text.contains("other"));
        assert!(text.contains("cradle_webhook_queue_depth 3\n"));
    }
}
