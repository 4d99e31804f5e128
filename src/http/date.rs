//! HTTP-date (RFC 9110 §5.6.7): agentd sends IMF-fixdate
//! (`Sun, 06 Nov 1994 08:49:37 GMT`) and, as a recipient must, reads all
//! three forms — IMF-fixdate, the obsolete RFC 850 form
//! (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`).

use crate::clock::{civil_from_days, days_from_civil};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Seconds since the epoch as IMF-fixdate.
pub fn format(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX / 2);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Any of the three HTTP-date forms → seconds since the epoch; `None` for
/// anything else (a recipient then ignores the field).
pub fn parse(s: &str) -> Option<u64> {
    let words: Vec<&str> = s.split_ascii_whitespace().collect();
    let (day, month, year, time) = match words.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [wd, d, mon, y, t, "GMT"] if wd.ends_with(',') && y.len() == 4 => (*d, *mon, y.parse().ok()?, *t),
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT (two-digit years: RFC 9110
        // says read one more than 50 years ahead as the past; 70–99 → 19xx).
        [wd, dmy, t, "GMT"] if wd.ends_with(',') => {
            let mut p = dmy.split('-');
            let (d, mon, y) = (p.next()?, p.next()?, p.next()?);
            let y: i64 = y.parse().ok()?;
            let y = match y {
                0..=69 => 2000 + y,
                70..=99 => 1900 + y,
                _ => y,
            };
            (d, mon, y, *t)
        }
        // asctime: Sun Nov  6 08:49:37 1994
        [_, mon, d, t, y] => (*d, *mon, y.parse().ok()?, *t),
        _ => return None,
    };
    let d: i64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let m = MONTHS.iter().position(|n| *n == month)? as i64 + 1;
    let mut hms = time.split(':').map(|v| v.parse::<i64>().ok());
    let (h, mi, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let secs = days_from_civil(year, m, d) * 86_400 + h * 3600 + mi * 60 + sec;
    u64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_imf_fixdate_and_reads_all_three_forms() {
        assert_eq!(format(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse(s), Some(784_111_777), "{s}");
        }
        let now = 1_780_000_000;
        assert_eq!(parse(&format(now)), Some(now));
        for bad in [
            "",
            "yesterday",
            "Sun, 06 Nov 1994 08:49:37 CET",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
