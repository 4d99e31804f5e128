//! Wall-clock time as A2A writes it: RFC 3339 in UTC with a `Z` and
//! millisecond precision (`2026-05-01T10:00:00.123Z`), and the lenient
//! reverse for `statusTimestampAfter`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`. By hand, in
/// one allocation: every task status and log line has one.
pub fn format_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let mut out = String::with_capacity(24);
    // A year past 9999 (or before 0) is out of RFC 3339's range: clamp.
    push_digits(&mut out, y.clamp(0, 9999) as u64, 4);
    out.push('-');
    push_digits(&mut out, u64::from(m), 2);
    out.push('-');
    push_digits(&mut out, u64::from(d), 2);
    out.push('T');
    push_digits(&mut out, rem / 3600, 2);
    out.push(':');
    push_digits(&mut out, rem / 60 % 60, 2);
    out.push(':');
    push_digits(&mut out, rem % 60, 2);
    out.push('.');
    push_digits(&mut out, ms % 1000, 3);
    out.push('Z');
    out
}

/// `n` as exactly `width` decimal digits (zero-padded; n < 10^width).
fn push_digits(out: &mut String, n: u64, width: u32) {
    for i in (0..width).rev() {
        out.push(char::from(b'0' + (n / 10u64.pow(i) % 10) as u8));
    }
}

/// Parses an RFC 3339 timestamp (any fraction length, `Z` or `±HH:MM`) to
/// epoch milliseconds. `None` for anything else.
pub fn parse_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 3)];
        frac_ms = digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
    }
    let offset_secs = match s.get(i..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) => {
            let oh: i64 = tz.get(1..3)?.parse().ok()?;
            let om: i64 = tz.get(4..6)?.parse().ok()?;
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    u64::try_from(secs * 1000 + frac_ms).ok()
}

// Howard Hinnant's days-from-civil algorithms (public domain); http::date uses them too.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ms(1_777_629_600_123), "2026-05-01T10:00:00.123Z");
        assert_eq!(format_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn parses_what_it_formats_and_common_variants() {
        for ms in [0, 1_777_629_600_123, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_ms(&format_ms(ms)), Some(ms));
        }
        assert_eq!(parse_ms("2026-05-01T10:00:00Z"), Some(1_777_629_600_000));
        assert_eq!(parse_ms("2026-05-01T10:00:00.123456789Z"), Some(1_777_629_600_123));
        assert_eq!(parse_ms("2026-05-01T12:00:00+02:00"), Some(1_777_629_600_000));
        assert_eq!(parse_ms("2026-05-01T10:00:00.1Z"), Some(1_777_629_600_100));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-05-01T10:00:00",
            "2026-05-01T10:00:00.Z",
        ] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }
}
