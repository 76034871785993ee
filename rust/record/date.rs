//! `last_modified`: the dates a record may give, and the forms the receivers take.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Utc};

use super::Timestamp;

/// The moment `last_modified` names, and its text when it was given in RFC 822 (which a GSA
/// feed passes through as given).
pub(crate) fn parse_date(
    ts: &Timestamp,
) -> std::result::Result<(DateTime<Utc>, Option<&str>), String> {
    let (t, rfc822) = parse_any_date(ts)?;
    // RFC 822 and Thunderstone dates have four-digit years.
    if !(1..=9999).contains(&t.year()) {
        return Err(format!(
            "the year {} cannot be written in a feed (years 1 to 9999)",
            t.year()
        ));
    }
    Ok((t, rfc822))
}

fn parse_any_date(ts: &Timestamp) -> std::result::Result<(DateTime<Utc>, Option<&str>), String> {
    let from_epoch = |secs: f64| {
        // `{secs:e}` for the messages: 1e300 would print as a 301-digit number.
        if !secs.is_finite() {
            return Err(format!("{secs:e} is not a time"));
        }
        DateTime::<Utc>::from_timestamp(secs.floor() as i64, 0)
            .map(|t| (t, None))
            .ok_or_else(|| format!("{secs:e} seconds since the epoch is out of range"))
    };
    let text = match ts {
        Timestamp::Epoch(secs) => return from_epoch(*secs),
        Timestamp::Text(t) => t.trim(),
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        if let Ok(secs) = text.parse::<f64>() {
            return from_epoch(secs);
        }
    }
    if let Ok(t) = DateTime::parse_from_rfc2822(text) {
        return Ok((t.with_timezone(&Utc), Some(text)));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok((t.with_timezone(&Utc), None));
    }
    // ISO 8601 without an offset is taken as UTC.
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, fmt) {
            return Ok((t.and_utc(), None));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok((d.and_hms_opt(0, 0, 0).expect("midnight").and_utc(), None));
    }
    Err(format!(
        "'{text}' is not a date: use RFC 822 (Tue, 6 Nov 2007 12:45:26 GMT), \
         ISO 8601 (2007-11-06T12:45:26Z) or seconds since the epoch"
    ))
}

/// `last_modified` for a GSA feed: RFC 822 as given, or converted to it in GMT.
pub(super) fn normalize_date(ts: &Timestamp) -> std::result::Result<String, String> {
    Ok(match parse_date(ts)? {
        (_, Some(rfc822)) => rfc822.to_owned(),
        (t, None) => t.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
    })
}
