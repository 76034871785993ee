//! What the appliance accepts as a URL: shared by records and ACLs (`inherit_from`), which
//! otherwise know nothing of each other's rules.

/// The URL must be absolute with a fully qualified host, as the appliance requires.
pub fn check_url(url: &str) -> std::result::Result<(), String> {
    if plainly_valid(url) {
        return Ok(());
    }
    check_in_full(url)
}

/// Whether `url` has the form nearly every record's URL has, which `check_in_full` accepts:
/// printable ASCII, `scheme://host` then anything, the host a dotted name without user, port or
/// brackets. Checked a byte at a time, without the searches and character decoding of the full
/// check, which took 3 to 5% of the CPU of writing 1 KB records; any other URL takes that.
pub(crate) fn plainly_valid(url: &str) -> bool {
    let b = url.as_bytes();
    // Loops, not `memchr` and slice searches: a URL's scheme and host are a few bytes, which a
    // call each cost more to search than a pass.
    let Some(colon) = b.iter().position(|&c| c == b':') else {
        return false;
    };
    let (scheme, Some(rest)) = (&b[..colon], b[colon..].strip_prefix(b"://")) else {
        return false;
    };
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
    // The host, up to its path, query or fragment, in one pass: a dot, none first nor two
    // together, and no user, port or brackets.
    let (mut host_ok, mut dotted, mut after_dot) = (true, false, true);
    for &c in rest {
        if matches!(c, b'/' | b'?' | b'#') {
            break;
        }
        let dot = c == b'.';
        host_ok &= !(dot && after_dot) && c.is_ascii_graphic() && !matches!(c, b'@' | b':' | b'[');
        (dotted, after_dot) = (dotted | dot, dot);
    }
    // Printable ASCII (no control character), without an early exit, which would cost a
    // branch a byte.
    let printable = b
        .iter()
        .fold(true, |ok, &c| ok & (c.wrapping_sub(0x20) < 0x5F));
    scheme_ok && host_ok && dotted && printable
}

/// `check_url`, for any URL.
pub(crate) fn check_in_full(url: &str) -> std::result::Result<(), String> {
    let Some((scheme, rest)) = scheme_and_rest(url) else {
        return Err(format!(
            "'{url}' is not an absolute URL (scheme://host/path)"
        ));
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(format!("'{url}' has no valid scheme"));
    }
    if let Some(c) = url.chars().find(|c| c.is_control()) {
        return Err(format!(
            "'{}' holds the control character {c:?}: a URL has none (percent-encode it)",
            url.escape_debug()
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match hostport.strip_prefix('[') {
        // An IPv6 literal is fully qualified by nature: only its port is left to check.
        Some(literal) => (
            "",
            literal
                .split_once(']')
                .and_then(|(_, p)| p.strip_prefix(':')),
        ),
        None => match hostport.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        },
    };
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        if !matches!(port.parse::<u16>(), Ok(1..)) || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "'{url}' has the port '{port}', not one of 1 to 65535"
            ));
        }
    }
    if hostport.starts_with('[') {
        return Ok(());
    }
    if host.is_empty() {
        return Err(format!("'{url}' has no host"));
    }
    // Not `contains("..")`: a substring search costs more to set up than a host takes to scan.
    let dots = host.as_bytes().windows(2).any(|pair| pair == b"..");
    if !host.contains('.') || host.starts_with('.') || dots {
        return Err(format!(
            "host '{host}' is not fully qualified (the appliance needs a name like host.example.com)"
        ));
    }
    if host.chars().any(char::is_whitespace) {
        return Err(format!("host '{host}' contains white space"));
    }
    Ok(())
}

/// `url` cut at its first `://`: its scheme, and the rest. Checked for every record: the first
/// `:` is found by `memchr`, and where it starts `://` (every valid URL) there is no need for a
/// substring search, which costs more to set up than the URL takes to check.
fn scheme_and_rest(url: &str) -> Option<(&str, &str)> {
    match url.find(':') {
        Some(i) if url[i..].starts_with("://") => Some((&url[..i], &url[i + 3..])),
        // No `://`, or it follows a `:` no scheme holds: the scheme is refused, as it would be.
        _ => url.split_once("://"),
    }
}

/// The path part of a URL, for guessing a MIME type from its extension.
pub fn url_path(url: &str) -> &str {
    let rest = scheme_and_rest(url).map_or(url, |(_, r)| r);
    let Some(start) = memchr::memchr(b'/', rest.as_bytes()) else {
        return "";
    };
    let path = &rest[start..];
    &path[..memchr::memchr2(b'?', b'#', path.as_bytes()).unwrap_or(path.len())]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_usual_urls_take_the_short_check() {
        for url in [
            "http://docs.example.com/123",
            "https://a.b/x?y=1#z",
            "svn+ssh://host.example.com",
        ] {
            assert!(plainly_valid(url), "{url}");
        }
        for url in [
            "http://user@host.example.com/",
            "http://host.example.com:8080/",
            "http://[::1]/",
            "http://host.example.com/caf\u{e9}",
        ] {
            assert!(!plainly_valid(url), "{url}");
            assert_eq!(check_url(url), Ok(()), "{url}");
        }
    }

    proptest! {
        /// The short check accepts only URLs the full check accepts, which XML carries (records
        /// skip the scan for what it cannot after it).
        #[test]
        fn the_short_check_accepts_nothing_the_full_check_refuses(
            scheme in "(http|h.t|1ttp|ht tp|)",
            sep in "(://|:/|:)",
            rest in "[a-z.@:\\[\\]/?# \t\r\x7f\u{85}\u{e9}-]{0,24}",
        ) {
            let url = format!("{scheme}{sep}{rest}");
            if plainly_valid(&url) {
                prop_assert_eq!(check_in_full(&url), Ok(()), "{}", url);
                prop_assert_eq!(crate::escape::first_unrepresentable(&url), None, "{}", url);
            }
        }

        /// `url_path` as the obvious reading of it.
        #[test]
        fn url_path_is_the_path(url in "(http://)?[a-z./?#:]{0,24}") {
            let rest = scheme_and_rest(&url).map_or(url.as_str(), |(_, r)| r);
            let path = rest.find('/').map_or("", |i| &rest[i..]);
            prop_assert_eq!(url_path(&url), path.split(['?', '#']).next().unwrap_or(""));
        }
    }
}
