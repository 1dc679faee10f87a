//! Names and values as Technitium writes them: reverse zone names
//! (`Zone.GetReverseZone`), TTL strings and TTL parsing (`ZoneFile`), and .NET's
//! round-trip time format.
//!
//! Contract: pure functions; [`parse_ttl`] returns the error text the server would put
//! in `errorMessage` for a value it cannot parse.

use std::net::IpAddr;

/// `Zone.GetReverseZone(address, width)`: the reverse name of the first `ceil(width/8)`
/// bytes (both nibbles of each byte for IPv6).
pub(super) fn reverse_zone(ip: IpAddr, width: u32) -> String {
    let count = width.div_ceil(8) as usize;
    match ip {
        IpAddr::V4(v4) => {
            let labels: Vec<String> = v4.octets().iter().take(count).rev().map(u8::to_string).collect();
            format!("{}.in-addr.arpa", labels.join("."))
        }
        IpAddr::V6(v6) => {
            let mut labels = Vec::new();
            for b in v6.octets().iter().take(count).rev() {
                labels.push(format!("{:x}", b & 0x0f));
                labels.push(format!("{:x}", b >> 4));
            }
            format!("{}.ip6.arpa", labels.join("."))
        }
    }
}

/// The full reverse name of an address (/32 or /128).
pub(super) fn reverse_name(ip: IpAddr) -> String {
    reverse_zone(ip, if ip.is_ipv4() { 32 } else { 128 })
}

/// Technitium's TTL string (`3600` → `1h`, `300` → `5m`, `0` → `0s`).
pub(super) fn ttl_string(ttl: u32) -> String {
    if ttl == 0 {
        return "0s".into();
    }
    let mut rest = ttl;
    let mut out = String::new();
    for (unit, secs) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= secs {
            out.push_str(&format!("{}{unit}", rest / secs));
            rest %= secs;
        }
    }
    out
}

/// `ZoneFile.ParseTtl`: seconds, or units `w d h m s` (`1h30m`).
pub(super) fn parse_ttl(s: &str) -> Result<u32, String> {
    let bad = || format!("The input string '{s}' was not in a correct format.");
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let (mut total, mut num) = (0u64, String::new());
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let mult = match c.to_ascii_lowercase() {
            'w' => 604_800,
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return Err(bad()),
        };
        total += num.parse::<u64>().map_err(|_| bad())? * mult;
        num.clear();
    }
    if !num.is_empty() || total > u64::from(u32::MAX) {
        return Err(bad());
    }
    u32::try_from(total).map_err(|_| bad())
}

/// Now as .NET's round-trip UTC format (`2026-05-01T10:20:30.1234567Z`).
pub(super) fn now_iso() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:7]Z");
    now.format(&fmt).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_names_follow_get_reverse_zone() {
        let v4: IpAddr = "192.0.2.10".parse().unwrap();
        assert_eq!(reverse_name(v4), "10.2.0.192.in-addr.arpa");
        assert_eq!(reverse_zone(v4, 24), "2.0.192.in-addr.arpa");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert!(reverse_zone(v6, 64).ends_with("8.b.d.0.1.0.0.2.ip6.arpa"));
        assert_eq!(reverse_zone(v6, 64).split('.').count(), 16 + 2);
        assert_eq!((ttl_string(3600), ttl_string(5400), ttl_string(0)), ("1h".into(), "1h30m".into(), "0s".into()));
        assert_eq!(parse_ttl("1h30m"), Ok(5400));
        assert!(parse_ttl("x").is_err());
    }
}
