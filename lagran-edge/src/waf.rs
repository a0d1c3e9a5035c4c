//! Who may fetch from a site: client networks, path prefixes, user agents and, for
//! hotlink protection, the `Referer`.
//!
//! Networks: the longest matching prefix among `allow_cidrs` and `deny_cidrs` decides
//! (a deny wins a tie), so `deny 10.0.0.0/8` + `allow 10.1.0.0/16` lets 10.1/16 in;
//! with a non-empty allow list an address matching neither is denied. Paths are
//! compared after percent-decoding and dot-segment removal, so `/%61dmin` and
//! `/x/../admin` meet a `/admin` rule.
//!
//! Path rules match regardless of ASCII case unless the site turns it off
//! (`waf_case_insensitive = false`): `/ADMIN` and `/Admin` meet a `/admin`
//! rule. Many origins fold case (IIS, Windows and macOS file systems, routers
//! configured case-insensitive), and a deny rule a client defeats by changing
//! one letter's case would protect nothing there. An operator whose origin
//! tells `/Admin` from `/admin` turns it off, and a path differing from a
//! denied one only in case is then served.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use lagran_site::Site;

use crate::host::{self, HostMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    Address,
    Path,
    UserAgent,
    Referer,
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Block::Address => "client address not allowed",
            Block::Path => "path not allowed",
            Block::UserAgent => "user agent not allowed",
            Block::Referer => "hotlinking not allowed",
        })
    }
}

#[derive(Debug)]
pub struct Waf {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
    deny_paths: Vec<String>,
    /// `deny_paths` (then kept lowercase) match regardless of ASCII case.
    paths_fold_case: bool,
    deny_user_agents: Vec<String>,
    /// `None` when hotlink protection is off.
    referers: Option<HostMap<()>>,
}

impl Waf {
    pub fn new(site: &Site) -> Waf {
        let referers = (!site.referer_allow.is_empty()).then(|| {
            let mut m = HostMap::default();
            for p in site.referer_allow.iter().chain([&site.host]) {
                m.insert(p, ());
            }
            m
        });
        Waf {
            allow: site.allow_cidrs.clone(),
            deny: site.deny_cidrs.clone(),
            deny_paths: if site.waf_case_insensitive {
                site.deny_paths.iter().map(|p| p.to_ascii_lowercase()).collect()
            } else {
                site.deny_paths.clone()
            },
            paths_fold_case: site.waf_case_insensitive,
            deny_user_agents: site.deny_user_agents.iter().map(|s| s.to_lowercase()).collect(),
            referers,
        }
    }

    /// The address, path and user-agent rules.
    pub fn check(&self, ip: IpAddr, path: &str, user_agent: Option<&str>) -> Result<(), Block> {
        let longest = |nets: &[IpNet]| nets.iter().filter(|n| n.contains(&ip)).map(IpNet::prefix_len).max();
        match (longest(&self.allow), longest(&self.deny)) {
            (Some(a), Some(d)) if d >= a => return Err(Block::Address),
            (None, Some(_)) => return Err(Block::Address),
            (None, None) if !self.allow.is_empty() => return Err(Block::Address),
            _ => {}
        }
        if !self.deny_paths.is_empty() {
            let mut path = normalize_path(path);
            if self.paths_fold_case {
                path.make_ascii_lowercase();
            }
            if self.deny_paths.iter().any(|p| path.starts_with(p.as_str())) {
                return Err(Block::Path);
            }
        }
        if let Some(ua) = user_agent.filter(|_| !self.deny_user_agents.is_empty()) {
            let ua = ua.to_lowercase();
            if self.deny_user_agents.iter().any(|p| ua.contains(p.as_str())) {
                return Err(Block::UserAgent);
            }
        }
        Ok(())
    }

    /// Hotlink protection: an absent or empty `Referer` passes; otherwise its host
    /// must match `referer_allow` or the site itself.
    pub fn check_referer(&self, referer: Option<&[u8]>) -> Result<(), Block> {
        let (Some(allowed), Some(referer)) = (&self.referers, referer) else {
            return Ok(());
        };
        if referer.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let host = std::str::from_utf8(referer)
            .ok()
            .and_then(|r| r.trim().parse::<hyper::Uri>().ok())
            .and_then(|uri| uri.host().map(host::normalize));
        match host {
            Some(h) if allowed.get(&h).is_some() => Ok(()),
            _ => Err(Block::Referer),
        }
    }
}

/// Percent-decodes `path` (invalid escapes stay as they are), merges repeated slashes
/// and removes `.` and `..` segments (RFC 3986 §5.2.4).
pub fn normalize_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                decoded.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded);
    let mut segments: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let trailing = decoded.ends_with('/') && !segments.is_empty();
    let mut out = format!("/{}", segments.join("/"));
    if trailing {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(toml: &str) -> Site {
        let text = format!("[[site]]\nhost = \"cdn.example.com\"\norigin = \"http://o\"\n{toml}");
        crate::config::Config::parse(&text, "test").unwrap().sites.remove(0).site().clone()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_decides_between_allow_and_deny() {
        let waf = Waf::new(&site("deny_cidrs = [\"10.0.0.0/8\"]\nallow_cidrs = [\"10.1.0.0/16\"]"));
        assert_eq!(waf.check(ip("10.2.0.1"), "/", None), Err(Block::Address));
        assert_eq!(waf.check(ip("10.1.0.1"), "/", None), Ok(()));
        assert_eq!(waf.check(ip("192.0.2.1"), "/", None), Err(Block::Address), "outside a non-empty allow list");
        let waf = Waf::new(&site("deny_cidrs = [\"2001:db8::/32\"]"));
        assert_eq!(waf.check(ip("2001:db8::1"), "/", None), Err(Block::Address));
        assert_eq!(waf.check(ip("192.0.2.1"), "/", None), Ok(()));
    }

    #[test]
    fn path_rules_see_through_encoding_and_dot_segments() {
        let waf = Waf::new(&site("deny_paths = [\"/admin\"]"));
        for p in ["/admin", "/admin/x", "//admin", "/%61dmin", "/x/../admin", "/./admin"] {
            assert_eq!(waf.check(ip("192.0.2.1"), p, None), Err(Block::Path), "{p}");
        }
        assert_eq!(waf.check(ip("192.0.2.1"), "/public/admin", None), Ok(()));
    }

    #[test]
    fn path_rules_ignore_case() {
        let waf = Waf::new(&site("deny_paths = [\"/Admin\", \"/private/\"]"));
        for p in ["/admin", "/ADMIN/x", "/aDmIn", "/%41dmin", "/PRIVATE/a", "/Private/"] {
            assert_eq!(waf.check(ip("192.0.2.1"), p, None), Err(Block::Path), "{p}");
        }
        assert_eq!(waf.check(ip("192.0.2.1"), "/privateer", None), Ok(()));
        assert_eq!(normalize_path("/a/b/../c/"), "/a/c/");
    }

    #[test]
    fn a_case_sensitive_origin_turns_case_folding_off() {
        let waf = Waf::new(&site("deny_paths = [\"/Admin\"]\nwaf_case_insensitive = false"));
        for p in ["/Admin", "/Admin/x", "/%41dmin", "/x/../Admin"] {
            assert_eq!(waf.check(ip("192.0.2.1"), p, None), Err(Block::Path), "{p}");
        }
        for p in ["/admin", "/ADMIN/x", "/aDmIn"] {
            assert_eq!(waf.check(ip("192.0.2.1"), p, None), Ok(()), "{p} is another path on this origin");
        }
        assert_eq!(normalize_path("/%zz"), "/%zz");
    }

    #[test]
    fn user_agent_substring_ignores_case() {
        let waf = Waf::new(&site("deny_user_agents = [\"SQLMap\"]"));
        assert_eq!(waf.check(ip("192.0.2.1"), "/", Some("sqlmap/1.7")), Err(Block::UserAgent));
        assert_eq!(waf.check(ip("192.0.2.1"), "/", Some("curl/8")), Ok(()));
    }

    #[test]
    fn referer_allow_list() {
        let waf = Waf::new(&site("referer_allow = [\"*.example.org\"]"));
        assert_eq!(waf.check_referer(None), Ok(()));
        assert_eq!(waf.check_referer(Some(b"")), Ok(()));
        assert_eq!(waf.check_referer(Some(b"https://www.example.org/page")), Ok(()));
        assert_eq!(waf.check_referer(Some(b"https://cdn.example.com/index.html")), Ok(()), "the site itself");
        assert_eq!(waf.check_referer(Some(b"https://evil.test/")), Err(Block::Referer));
        assert_eq!(waf.check_referer(Some(b"not a url")), Err(Block::Referer));
        let open = Waf::new(&site(""));
        assert_eq!(open.check_referer(Some(b"https://evil.test/")), Ok(()));
    }
}
