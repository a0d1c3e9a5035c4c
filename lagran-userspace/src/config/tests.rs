//! The configuration's parsing, environment and validation.

use super::*;

#[test]
fn environment_wins_over_file() {
    let mut cfg: Config = toml::from_str("[dns]\nttl = 60\n").unwrap();
    assert_eq!(cfg.dns.ttl, 60);
    cfg.apply_env(|k| (k == "DNS_TTL").then(|| "20".to_string())).unwrap();
    assert_eq!(cfg.dns.ttl, 20);
}

#[test]
fn bad_environment_value_names_the_variable() {
    let mut cfg = Config::default();
    let err = cfg.apply_env(|k| (k == "DNS_FALLBACK_IP").then(|| "not-an-ip".to_string())).unwrap_err();
    assert!(err.to_string().contains("DNS_FALLBACK_IP"), "{err}");
}

#[test]
fn rrl_has_toml_keys_and_the_environment_wins() {
    let mut cfg: Config =
        toml::from_str("[rrl]\nresponses_per_second = 5\nslip = 3\nwindow_secs = 4\n[cookies]\ngrace_secs = 60\n")
            .unwrap();
    assert_eq!((cfg.rrl.responses_per_second, cfg.rrl.slip, cfg.rrl.window_secs), (5, 3, 4));
    assert_eq!(cfg.cookies.grace_secs, 60);
    cfg.apply_env(|k| match k {
        "RRL_RPS" => Some("100".to_string()),
        "RRL_SLIP" => Some("0".to_string()),
        _ => None,
    })
    .unwrap();
    assert_eq!((cfg.rrl.responses_per_second, cfg.rrl.slip), (100, 0));
    cfg.validate().unwrap();
    assert_eq!(Config::default().rrl.responses_per_second, 0, "RRL is off by default");
    cfg.rrl.window_secs = 0;
    assert!(cfg.validate().is_err());
}

#[test]
fn unknown_toml_key_is_an_error() {
    assert!(toml::from_str::<Config>("dns_ttl = 3\n").is_err());
}

#[test]
fn dns_listen_takes_one_address_or_many() {
    let one: Config = toml::from_str("dns_listen = \"10.0.0.2:53\"\n").unwrap();
    assert_eq!(one.dns_listen, vec!["10.0.0.2:53".parse::<SocketAddr>().unwrap()]);
    let many: Config = toml::from_str("dns_listen = [\"10.0.0.2:53\", \"[2001:db8::2]:53\"]\n").unwrap();
    assert_eq!(many.dns_listen.len(), 2, "both addresses kept: {:?}", many.dns_listen);
    assert!(many.dns_listen[1].is_ipv6());
    let err = toml::from_str::<Config>("dns_listen = \"not an address\"\n").unwrap_err().to_string();
    assert!(err.contains("dns_listen") || err.contains("address"), "the error says what is expected: {err}");
    let mut env = Config::default();
    env.apply_env(|k| (k == "DNS_LISTEN").then(|| "127.0.0.1:53, [::1]:53".to_string())).unwrap();
    assert_eq!(env.dns_listen.len(), 2, "DNS_LISTEN is a comma-separated list: {:?}", env.dns_listen);
    env.dns_listen.push(env.dns_listen[0]);
    assert!(env.validate().unwrap_err().to_string().contains("twice"));
    env.dns_listen.clear();
    assert!(env.validate().is_err(), "no address at all is refused");
}

#[test]
fn entry_points_parse_and_need_a_certificate() {
    let text = "[dns]\ndot_listen = \"127.0.0.1:853\"\ndoq_listen = \"127.0.0.1:853\"\n\
                [http_redirect]\nlisten = \"127.0.0.1:80\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n";
    let mut cfg: Config = toml::from_str(text).unwrap();
    assert_eq!(cfg.dns.dot_listen, vec!["127.0.0.1:853".parse::<SocketAddr>().unwrap()]);
    assert_eq!(cfg.http_redirect.trusted_proxies.len(), 1);
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("tls.cert"), "DoT without a certificate is refused, naming the keys: {err}");
    cfg.tls = toml::from_str("cert = \"c.pem\"\nkey = \"k.pem\"\n").unwrap();
    cfg.validate().unwrap();
    // Arrays, like dns_listen; a repeated address is refused.
    let many: Config = toml::from_str("[http_redirect]\nlisten = [\"127.0.0.1:80\", \"[::1]:80\"]\n").unwrap();
    assert_eq!(many.http_redirect.listen.len(), 2);
    let twice: Config = toml::from_str("[http_redirect]\nlisten = [\"127.0.0.1:80\", \"127.0.0.1:80\"]\n").unwrap();
    assert!(twice.validate().unwrap_err().to_string().contains("http_redirect.listen"));
}

#[test]
fn entry_points_take_the_environment_like_dns_listen() {
    let env = |k: &str| {
        let v = match k {
            "DOT_LISTEN" => "127.0.0.1:853, [::1]:853",
            "DOQ_LISTEN" => "127.0.0.1:8853",
            "HTTP_LISTEN" => "127.0.0.1:80",
            "TLS_CERT" => "/etc/lagran/dns.pem",
            "TLS_KEY" => "/etc/lagran/dns.key",
            _ => return None,
        };
        Some(v.to_string())
    };
    let mut cfg: Config = toml::from_str("[dns]\ndot_listen = \"10.0.0.1:853\"\n").unwrap();
    cfg.apply_env(env).unwrap();
    assert_eq!(cfg.dns.dot_listen.len(), 2, "the environment wins over TOML: {:?}", cfg.dns.dot_listen);
    assert_eq!(cfg.dns.doq_listen, vec!["127.0.0.1:8853".parse::<SocketAddr>().unwrap()]);
    assert_eq!(cfg.http_redirect.listen, vec!["127.0.0.1:80".parse::<SocketAddr>().unwrap()]);
    assert_eq!(cfg.tls.cert.as_deref(), Some(Path::new("/etc/lagran/dns.pem")));
    assert_eq!(cfg.tls.key.as_deref(), Some(Path::new("/etc/lagran/dns.key")));
    cfg.validate().unwrap();
    let err = Config::default().apply_env(|k| (k == "HTTP_LISTEN").then(|| "80".to_string())).unwrap_err().to_string();
    assert!(err.contains("HTTP_LISTEN"), "a bad value names the variable: {err}");
}

#[test]
fn answers_per_query_is_bounded() {
    let mut cfg = Config::default();
    cfg.schedule.answers_per_query = 5;
    assert!(cfg.validate().is_err());
}

#[test]
fn geo_max_change_ratio_has_a_toml_key_and_the_environment_wins() {
    let mut cfg: Config = toml::from_str("[geo]\nmax_change_ratio = 0.05\n").unwrap();
    assert_eq!(cfg.geo.max_change_ratio, 0.05);
    assert_eq!(Config::default().geo.max_change_ratio, 0.01, "the default is 1 %");
    cfg.apply_env(|k| (k == "GEO_MAX_CHANGE_RATIO").then(|| "0.2".to_string())).unwrap();
    assert_eq!(cfg.geo.max_change_ratio, 0.2);
    cfg.geo.max_change_ratio = 1.5;
    assert!(cfg.validate().unwrap_err().to_string().contains("geo.max_change_ratio"));
    assert!(toml::from_str::<Config>("[dns]\ncache_secs = 3\n").is_err(), "DNS_CACHE_SECS had no effect: gone");
}
