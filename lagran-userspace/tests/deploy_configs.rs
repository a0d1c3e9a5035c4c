//! The example configuration files the Debian package installs under
//! `/etc/lagran/` (from `deploy/etc/`) parse and pass validation as shipped.

use std::path::PathBuf;

use lagran::config::Config;

fn deploy_etc(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/etc").join(name)
}

#[test]
fn every_packaged_configuration_file_is_valid() {
    for name in ["control.toml", "dns.toml", "serve.toml"] {
        let path = deploy_etc(name);
        let config = Config::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        config.validate().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(config.api_listen.to_string(), "127.0.0.1:8080", "{name}: the API stays on the loopback");
    }
    let dns = Config::from_file(&deploy_etc("dns.toml")).expect("dns.toml");
    assert!(dns.dns_listen.iter().all(|a| a.port() == 53), "the NS host answers on port 53: {:?}", dns.dns_listen);
}
