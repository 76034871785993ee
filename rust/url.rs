//! What the appliance accepts as a URL: shared by records and ACLs (`inherit_from`), which
//! otherwise know nothing of each other's rules.

/// The URL must be absolute with a fully qualified host, as the appliance requires.
pub fn check_url(url: &str) -> std::result::Result<(), String> {
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
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    path.split(['?', '#']).next().unwrap_or("")
}
