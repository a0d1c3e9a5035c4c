//! Host names as sites, certificates and Referer rules are keyed by.
//!
//! A name is compared lower-case, without port or trailing dot. A pattern is an exact
//! name or `*.suffix`; the wildcard stands for exactly one label, as in certificates
//! (RFC 6125 §6.4.3: "the client SHOULD NOT attempt to match a presented identifier
//! where the wildcard character is embedded within an A-label or U-label"; one label
//! only). Exact entries win over wildcard ones.

use std::borrow::Cow;
use std::collections::HashMap;

/// Lower-cases `host` and strips a `:port` suffix, IPv6 brackets and a trailing dot.
pub fn normalize(host: &str) -> String {
    normalized(host).into_owned()
}

/// [`normalize`], borrowing `host` when it is already in that form (the usual case).
pub fn normalized(host: &str) -> Cow<'_, str> {
    let host = host.trim();
    let host = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or(host)
    } else {
        host
    };
    let host = host.trim_end_matches('.');
    match host.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(host.to_ascii_lowercase()),
        false => Cow::Borrowed(host),
    }
}

/// Whether `pattern` is a name or `*.suffix` (the site schema's rule).
pub use lagran_site::valid_host_pattern as valid_pattern;

/// Whether the normalized `host` is served by the normalized `pattern`: the
/// name itself, or for `*.suffix` one label before the suffix (as [`HostMap`]).
pub fn matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.split_once('.').is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => host == pattern,
    }
}

/// Values keyed by host pattern.
#[derive(Debug)]
pub struct HostMap<T> {
    exact: HashMap<String, T>,
    wildcard: HashMap<String, T>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        HostMap { exact: HashMap::new(), wildcard: HashMap::new() }
    }
}

impl<T> HostMap<T> {
    /// Adds `value` under `pattern`; returns the value it replaces, if any.
    pub fn insert(&mut self, pattern: &str, value: T) -> Option<T> {
        let pattern = normalize(pattern);
        match pattern.strip_prefix("*.") {
            Some(suffix) => self.wildcard.insert(suffix.to_owned(), value),
            None => self.exact.insert(pattern, value),
        }
    }

    /// The value for `host` (any case, with or without port): exact, then wildcard.
    pub fn get(&self, host: &str) -> Option<&T> {
        let host = normalized(host);
        self.exact.get(&*host).or_else(|| {
            let (label, suffix) = host.split_once('.')?;
            if label.is_empty() { None } else { self.wildcard.get(suffix) }
        })
    }

    /// Every value, exact entries first.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.exact.values().chain(self.wildcard.values())
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_case_port_and_trailing_dot() {
        assert_eq!(normalize("CDN.Example.com:8080"), "cdn.example.com");
        assert_eq!(normalize("cdn.example.com."), "cdn.example.com");
        assert_eq!(normalize("[2001:db8::1]:443"), "2001:db8::1");
        assert_eq!(normalize("2001:db8::1"), "2001:db8::1");
    }

    #[test]
    fn exact_wins_and_wildcard_covers_one_label() {
        let mut m = HostMap::default();
        m.insert("*.example.com", "wild");
        m.insert("www.example.com", "www");
        assert_eq!(m.get("www.example.com"), Some(&"www"));
        assert_eq!(m.get("img.example.com:443"), Some(&"wild"));
        assert_eq!(m.get("example.com"), None, "a wildcard does not cover its own suffix");
        assert_eq!(m.get("a.b.example.com"), None, "a wildcard covers exactly one label");
    }
}
