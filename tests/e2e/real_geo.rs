//! With the real ip2region file (fetched by `scripts/fetch-geoip.sh`, which
//! `cargo xtask setup` runs): the README's first `dig` works as it says.

use crate::support::{Daemon, Geo, Options, have_tool, tools_required, workspace_root};

#[test]
fn readme_dig_with_the_real_database() {
    let path = workspace_root().join("data/ip2region.xdb");
    if !path.is_file() {
        assert!(
            !tools_required(),
            "{} is missing: run scripts/fetch-geoip.sh (cargo xtask setup does)",
            path.display()
        );
        eprintln!("note: skipped, no real geo database at {}", path.display());
        return;
    }
    if !have_tool("dig", "readme_dig") {
        return;
    }
    let d = Daemon::start(Options { geo: Geo::Real(path), ..Options::default() });
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}", r.text);
    assert_eq!(r.answer[0].ttl, 30);
    let ecs = r.ecs.clone().expect("ECS echoed");
    let scope: u8 = ecs.rsplit('/').next().unwrap().parse().unwrap();
    assert!(scope > 0 && scope <= 24, "scope set to the partition prefix: {ecs}");
    // Beijing Unicom is not Shenzhen Telecom: hk-01 wins on weight
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=123.112.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "{}", r.text);
}
