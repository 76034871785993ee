//! `last_modified`: the dates a record may give, and the forms the receivers take.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike, Utc};

use super::Timestamp;

/// The moment `last_modified` names, and its text when it was given in RFC 822 (which
/// fingerprints count as spelt).
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
    // chrono reads a leap second (23:59:60) as the second before it with a second more of
    // nanoseconds. No receiver's form of a date has a 60th second (`fastfeed validate` refuses
    // one, and so does the emulator), and rounding would send another instant.
    if t.nanosecond() >= 1_000_000_000 {
        return Err(format!(
            "{} UTC is a leap second, which no feed's date can carry: give the second before \
             or after it",
            t.format("%Y-%m-%d %H:%M:%S")
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

/// `last_modified` for a GSA feed: the guide's form of RFC 822 (`Mon, 15 Nov 2004 04:58:08
/// GMT`), whatever form it was given in. RFC 822 allows spellings an appliance may not read
/// (`gMt`, military zones, `UT`, two-digit years, comments): the same instant is written in
/// the one form the guide shows.
pub(super) fn normalize_date(ts: &Timestamp) -> std::result::Result<String, String> {
    let (t, _) = parse_date(ts)?;
    Ok(t.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gsa(text: &str) -> std::result::Result<String, String> {
        normalize_date(&Timestamp::Text(text.into()))
    }

    #[test]
    fn every_date_is_written_in_the_guides_form_of_the_same_instant() {
        const GUIDES: &str = "Tue, 06 Nov 2007 12:45:26 GMT";
        for given in [
            "Tue, 6 Nov 2007 12:45:26 GMT",
            "Tue, 06 Nov 2007 12:45:26 gMt",
            "Tue, 06 Nov 2007 12:45:26 UT",
            "Tue, 06 Nov 2007 13:45:26 +0100",
            "Tue, 06 Nov 2007 07:45:26 EST",
            "Tue, 06 Nov 07 12:45:26 GMT",
            "Tue, 06 Nov 2007 12:45:26 GMT (UTC)",
            // Military zones: RFC 2822 reads them as -0000, RFC 822 having defined them wrongly.
            "Tue, 06 Nov 2007 12:45:26 a",
            "2007-11-06T13:45:26+01:00",
            "2007-11-06 12:45:26.9",
            "1194353126",
        ] {
            assert_eq!(gsa(given).as_deref(), Ok(GUIDES), "{given}");
        }
        assert_eq!(
            normalize_date(&Timestamp::Epoch(1_194_353_126.9)).as_deref(),
            Ok(GUIDES)
        );
        assert_eq!(
            gsa("2007-11-06").as_deref(),
            Ok("Tue, 06 Nov 2007 00:00:00 GMT")
        );
    }

    #[test]
    fn a_leap_second_is_refused_not_rounded() {
        for given in [
            "Sat, 31 Dec 2016 23:59:60 GMT",
            "Sun, 01 Jan 2017 00:59:60 +0100",
            "2016-12-31T23:59:60Z",
            "2016-12-31 23:59:60",
        ] {
            let err = gsa(given).unwrap_err();
            assert!(
                err.contains("2016-12-31 23:59:60 UTC is a leap second"),
                "{given}: {err}"
            );
            assert!(parse_date(&Timestamp::Text(given.into())).is_err());
        }
    }
}
