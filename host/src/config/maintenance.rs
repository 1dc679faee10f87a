//! `[maintenance]` in cradle.toml: how `cradle plan` and `cradle apply` treat a
//! plan file.
//!
//! Contract: every key has a default (a missing section is the default
//! section). `plan_max_age` is a duration written as a number and a unit —
//! `s`, `m`, `h` or `d`, several in a row (`"1h30m"`) — and must be more than
//! zero; anything else is refused when cradle.toml is read, naming the key.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// `[maintenance]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceConfig {
    /// How old a plan file `cradle apply` still accepts (default 24 h): a
    /// plan reviewed long ago no longer describes what the operator saw.
    #[serde(default = "default_plan_max_age", deserialize_with = "max_age")]
    pub plan_max_age: Duration,
}

/// The default `plan_max_age`: one day.
pub const DEFAULT_PLAN_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

fn default_plan_max_age() -> Duration {
    DEFAULT_PLAN_MAX_AGE
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig { plan_max_age: DEFAULT_PLAN_MAX_AGE }
    }
}

fn max_age<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    match parse_duration(&text) {
        Ok(d) if d.is_zero() => Err(serde::de::Error::custom(format!(
            "plan_max_age `{text}` is zero: every plan would be refused; write e.g. \"24h\""
        ))),
        Ok(d) => Ok(d),
        Err(why) => Err(serde::de::Error::custom(format!("plan_max_age `{text}`: {why}"))),
    }
}

/// `"90m"`, `"24h"`, `"1h30m"`, `"2d"`, `"45s"`: a sum of numbers each
/// followed by a unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty: write a number and a unit (s, m, h, d), e.g. \"24h\"".into());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            other => return Err(format!("`{other}` is not a unit (s, m, h, d)")),
        };
        let n: u64 = digits.parse().map_err(|_| format!("the unit `{c}` has no number before it"))?;
        digits.clear();
        total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or("too long a duration")?;
    }
    if !digits.is_empty() {
        return Err(format!("`{digits}` has no unit: write e.g. \"{digits}h\" (s, m, h, d)"));
    }
    Ok(Duration::from_secs(total))
}

/// A duration as the operator reads it: `26 h`, `90 min`, `45 s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::fixture::{GOOD, parse};

    #[test]
    fn plan_max_age_defaults_to_a_day_and_reads_units() {
        assert_eq!(parse(GOOD).expect("valid").maintenance.plan_max_age, Duration::from_secs(86_400));
        for (text, secs) in [("90m", 5400), ("24h", 86_400), ("1h30m", 5400), ("2d", 172_800), ("45s", 45)] {
            let toml = format!("{GOOD}[maintenance]\nplan_max_age = \"{text}\"\n");
            assert_eq!(parse(&toml).expect(text).maintenance.plan_max_age, Duration::from_secs(secs), "{text}");
        }
    }

    #[test]
    fn a_bad_plan_max_age_is_refused_naming_the_key() {
        for bad in ["24", "h", "24x", "", "0h"] {
            let toml = format!("{GOOD}[maintenance]\nplan_max_age = \"{bad}\"\n");
            let e = parse(&toml).expect_err(bad).to_string();
            assert!(e.contains("plan_max_age"), "{bad}: {e}");
        }
        let e = parse(&format!("{GOOD}[maintenance]\nmax_age = \"1h\"\n")).expect_err("unknown key").to_string();
        assert!(e.contains("max_age"), "{e}");
    }

    #[test]
    fn durations_read_as_an_operator_says_them() {
        assert_eq!(human(Duration::from_secs(26 * 3600 + 100)), "26 h");
        assert_eq!(human(Duration::from_secs(5400)), "90 min");
        assert_eq!(human(Duration::from_secs(30)), "30 s");
    }
}
