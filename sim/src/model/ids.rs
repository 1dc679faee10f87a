//! Generated identifiers: MAC addresses, SMBIOS UUIDs, boot IDs, UPIDs; size parsing.
//!
//! Contract: MACs use Proxmox's `BC:24:11` OUI; identifiers come from a counter mixed
//! with the seed (deterministic per seed) or, for boot IDs and secrets, from the OS RNG.

use ring::rand::SecureRandom;

fn mix(seed: u64, counter: u64) -> u64 {
    let mut z = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A MAC with Proxmox's OUI, from the seed and a counter.
pub fn mac(seed: u64, counter: u64) -> String {
    let x = mix(seed, counter);
    format!("BC:24:11:{:02X}:{:02X}:{:02X}", (x >> 16) & 0xff, (x >> 8) & 0xff, x & 0xff)
}

fn uuid_from(a: u64, b: u64) -> String {
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// A v4-style UUID from the seed and a counter.
pub fn uuid(seed: u64, counter: u64) -> String {
    uuid_from(mix(seed, counter), mix(seed ^ 0x5555, counter))
}

/// Random bytes from the OS (for boot IDs, secrets and host keys).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // ring's SystemRandom only fails when the OS RNG is unavailable; fall back to the
    // clock so the simulator keeps working (these values need uniqueness, not secrecy,
    // except the token secret, which is checked in `random_secret`).
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (mix(t as u64, i as u64) & 0xff) as u8;
        }
    }
    b
}

/// A random UUID (boot IDs).
pub fn random_uuid() -> String {
    let b: [u8; 16] = random_bytes();
    let a = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let c = u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    uuid_from(a, c)
}

/// Unix time now, in seconds.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Parse a PVE size (`32G`, `512M`, `10`) into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1 << 30),
    };
    let n: f64 = num.parse().ok()?;
    if n < 0.0 {
        return None;
    }
    Some((n * mult as f64) as u64)
}

/// Format bytes as PVE writes disk sizes (`32G`, `512M`).
pub fn format_size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("{}G", bytes >> 30)
    } else if bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes.div_ceil(1 << 10))
    }
}

/// Format bytes as pve-common's `JSONSchema::format_size` does: the largest of
/// `T`/`G`/`M`/`K` the value is an exact multiple of, else plain bytes.
pub fn format_size_exact(bytes: u64) -> String {
    let units = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in units {
        if bytes >= (1 << shift) && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Format an RFC 2822 date as cloud-init's `last_update` (`Sat, 30 Nov 2024 09:46:47 +0000`).
pub fn rfc2822(unix: u64) -> String {
    let (wd, d, mon, y, secs) = civil(unix);
    format!("{wd}, {d:02} {mon} {y} {:02}:{:02}:{:02} +0000", secs / 3600, (secs / 60) % 60, secs % 60)
}

/// The time stamp of a cloud-init log line (`2024-11-30 09:46:47,000`).
pub fn log_stamp(unix: u64) -> String {
    let (_, d, mon, y, secs) = civil(unix);
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let m = months.iter().position(|x| *x == mon).unwrap_or(0) + 1;
    format!("{y}-{m:02}-{d:02} {:02}:{:02}:{:02},000", secs / 3600, (secs / 60) % 60, secs % 60)
}

/// (weekday, day, month, year, seconds of the day), UTC.
fn civil(unix: u64) -> (&'static str, i64, &'static str, i64, u64) {
    let days = (unix / 86400) as i64;
    let secs = unix % 86400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days.rem_euclid(7)) as usize];
    let mon = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][(m - 1) as usize];
    (wd, d, mon, y, secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_sizes_and_macs_have_pve_shapes() {
        assert_eq!(rfc2822(1_732_960_007), "Sat, 30 Nov 2024 09:46:47 +0000");
        assert_eq!(log_stamp(1_732_960_007), "2024-11-30 09:46:47,000");
        assert_eq!(parse_size("32G"), Some(32 << 30));
        assert_eq!(format_size(42 << 30), "42G");
        let m = mac(1, 2);
        assert!(m.starts_with("BC:24:11:") && m.len() == 17, "{m}");
        assert_ne!(mac(1, 2), mac(1, 3));
    }
}
