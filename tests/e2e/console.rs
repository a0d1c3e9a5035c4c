//! The operator console (`/ui`) in a real browser: headless Chromium driven
//! over WebDriver (chromedriver, fantoccini), against the real daemon.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{Daemon, Options, tools_required, workspace_root};

const ADMIN: &str = "admin-console-secret";
const AGENT: &str = "agent-console-secret";
const GD_TELECOM: &str = r#"td.cell[data-province="广东"][data-isp="电信"]"#;

/// Whether `chromium` and `chromedriver` run; panics when tools are required,
/// else prints a note and returns false.
pub(crate) fn have_browser(test: &str) -> bool {
    for tool in ["chromium", "chromedriver"] {
        let ok = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(!tools_required(), "{test}: `{tool}` is required (run `cargo xtask setup`)");
            eprintln!("note: {test}: skipped, `{tool}` is not installed");
            return false;
        }
    }
    true
}

/// A chromedriver on a free loopback port, killed on drop.
pub(crate) struct Driver {
    child: Child,
    pub(crate) url: String,
}

impl Driver {
    pub(crate) fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while ureq::get(&format!("{url}/status")).timeout(Duration::from_secs(1)).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer on {url} within 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        Driver { child, url }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the screenshots go: `target/ui-screenshots/`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("creating target/ui-screenshots");
    dir
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("taking a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).expect("saving the screenshot");
}

/// A WebDriver session with headless Chromium (sandbox and GPU off, as
/// under root in CI), `args` added to its command line.
pub(crate) async fn headless_chromium(driver: &Driver, args: &[String]) -> Client {
    let mut all: Vec<String> =
        ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"].map(String::from).to_vec();
    all.extend_from_slice(args);
    let caps = json!({"goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": all}});
    let mut b = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    b.capabilities(caps.as_object().expect("an object").clone());
    b.connect(&driver.url).await.expect("a WebDriver session with headless Chromium")
}

/// Waits (bounded) until `f` returns `Some`, re-running it every 200 ms.
pub(crate) async fn wait_for<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn attr(c: &Client, css: &str, name: &str) -> Option<String> {
    let e = c.find(Locator::Css(css)).await.ok()?;
    e.attr(name).await.ok().flatten()
}

pub(crate) async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.expect("running a script in the page")
}

/// Clicks the element `css` selects, finding it again if a poll replaced it meanwhile.
async fn click(c: &Client, css: &str) {
    wait_for(Duration::from_secs(10), css, || async {
        let e = c.find(Locator::Css(css)).await.ok()?;
        e.click().await.ok()
    })
    .await;
}

async fn tab(c: &Client, view: &str) {
    click(c, &format!(r#"nav button[data-view="{view}"]"#)).await;
}

#[test]
fn the_console_shows_who_answers_whom_and_follows_changes_live() {
    if !have_browser("console") {
        return;
    }
    let d = Daemon::start(Options {
        env: vec![("ADMIN_TOKEN".into(), ADMIN.into()), ("AGENT_TOKEN".into(), AGENT.into())],
        ..Options::default()
    });
    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = headless_chromium(&driver, &["--window-size=1500,1500".into(), "--lang=zh-CN".into()]).await;
        let result = drive(&c, &d).await;
        let _ = c.close().await;
        result
    });
    drop(driver);
}

async fn drive(c: &Client, d: &Daemon) {
    let base = format!("http://{}", d.api);
    let admin = format!("Bearer {ADMIN}");
    let admin_h = [("authorization", admin.as_str())];

    // The tokens are asked once, in the login form.
    c.goto(&format!("{base}/ui")).await.unwrap();
    let token = c.find(Locator::Css("input#token")).await.expect("a login form while no token is given");
    screenshot(c, "login").await;
    token.send_keys("not-a-token").await.unwrap();
    c.find(Locator::Css("form button[type=submit]")).await.unwrap().click().await.unwrap();
    wait_for(Duration::from_secs(10), "the refusal", || async {
        c.source().await.ok().filter(|s| s.contains("neither the admin nor the agent token"))
    })
    .await;
    let token = c.find(Locator::Css("input#token")).await.unwrap();
    token.send_keys(ADMIN).await.unwrap();
    c.find(Locator::Css("form button[type=submit]")).await.unwrap().click().await.unwrap();

    // The matrix: 广东/电信 is gz-01's.
    let node = wait_for(Duration::from_secs(20), "the 广东/电信 cell", || async {
        attr(c, GD_TELECOM, "data-node").await.filter(|n| !n.is_empty())
    })
    .await;
    assert_eq!(node, "gz-01");
    assert_eq!(attr(c, GD_TELECOM, "data-state").await.as_deref(), Some("steady"));
    let cells = c.find_all(Locator::Css("#matrix td.cell")).await.unwrap();
    assert_eq!(cells.len(), 36 * 4, "36 rows (31 provinces, 香港, 澳门, 台湾, 海外, 未知) × 4 carriers");
    for (p, i) in [("香港", "其他"), ("海外", "其他"), ("未知", "其他"), ("北京", "联通")] {
        let css = format!(r#"td.cell[data-province="{p}"][data-isp="{i}"]"#);
        let state = attr(c, &css, "data-state").await.unwrap_or_else(|| panic!("a {p}/{i} cell"));
        assert!(["steady", "failover", "canary", "mixed", "empty"].contains(&state.as_str()), "{p}/{i}: {state}");
    }
    // The world beside it: continents, then countries with nodes or clients.
    let world = |css: &'static str| async move { attr(c, css, "data-node").await };
    assert_eq!(world(r#"#world tr[data-country="US"]"#).await.as_deref(), Some("hk-01"), "the US is hk-01's");
    assert_eq!(world(r#"#world tr[data-continent="NA"][data-country=""]"#).await.as_deref(), Some("hk-01"));
    for country in ["CN", "HK", "KR"] {
        let css = format!(r#"#world tr[data-continent="AS"][data-country="{country}"]"#);
        assert!(attr(c, &css, "data-node").await.is_some(), "{country} has a node: a row of its own");
    }
    let (_, cookie_check) = d.http("GET", "/api/v1/console/session", None, &[]);
    assert_eq!(cookie_check["read"], false, "without the cookie nothing reads: {cookie_check}");
    // The marker of this page load, and one of our own: both must survive until the end.
    let load_id = js(c, "return document.documentElement.dataset.loadId").await;
    assert!(load_id.as_str().is_some_and(|s| !s.is_empty()), "the page sets its load marker: {load_id}");
    js(c, "window.__e2eMarker = 'still-here'; return null").await;
    screenshot(c, "matrix").await;

    // Opening the cell shows the ranked decision (`lagran explain`'s).
    click(c, GD_TELECOM).await;
    let text = wait_for(Duration::from_secs(10), "the decision", || async {
        let t = c.find(Locator::Css("#explain")).await.ok()?.text().await.ok()?;
        t.contains("same-province").then_some(t)
    })
    .await;
    for want in ["gz-01", "hk-01", "kr-01", "weight"] {
        assert!(text.contains(want), "the decision lists {want}:\n{text}");
    }
    screenshot(c, "matrix-explain").await;

    // What-if: gz-01 down moves 广东/电信 to hk-01, before anything is published.
    let (_, before) = d.get("/healthz");
    tab(c, "whatif").await;
    wait_for(Duration::from_secs(10), "the what-if node list", || async {
        c.find(Locator::Css(r#"#wi-node option[value="gz-01"]"#)).await.ok()
    })
    .await;
    js(c, "document.getElementById('wi-node').value = 'gz-01'; document.getElementById('wi-kind').value = 'offline'; return null").await;
    click(c, "#wi-run").await;
    let to = wait_for(Duration::from_secs(20), "the what-if result", || async {
        attr(c, r#"#whatif-moves tr.move[data-province="广东"][data-isp="电信"]"#, "data-to").await
    })
    .await;
    assert_eq!(to, "hk-01");
    let from = attr(c, r#"#whatif-moves tr.move[data-province="广东"][data-isp="电信"]"#, "data-from").await;
    assert_eq!(from.as_deref(), Some("gz-01"));
    screenshot(c, "whatif").await;
    let (_, after) = d.get("/healthz");
    assert_eq!(before["route_table_version"], after["route_table_version"], "the what-if published nothing");
    let (_, s) = d.http("GET", "/api/v1/schedule?domain=edge.lagran.net&subnet=58.60.0.0/24", None, &admin_h);
    assert_eq!(s["primary"]["name"], "gz-01", "still answered by gz-01: {s}");

    // Nodes: status, probes, load, heartbeat, pool, and the actions.
    tab(c, "nodes").await;
    wait_for(Duration::from_secs(10), "the nodes table", || async {
        c.find(Locator::Css(r#"#nodes tr[data-node="kr-01"]"#)).await.ok()
    })
    .await;
    let row = c.find(Locator::Css(r#"#nodes tr[data-node="gz-01"]"#)).await.unwrap().text().await.unwrap();
    assert!(row.contains("online") && row.contains("default") && row.contains("never"), "{row}");
    screenshot(c, "nodes").await;

    // The change, made outside the page: the open page follows without a reload.
    tab(c, "matrix").await;
    let (s, v) = d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &admin_h);
    assert_eq!(s, 200, "{v}");
    let node = wait_for(Duration::from_secs(20), "广东/电信 to move to hk-01", || async {
        attr(c, GD_TELECOM, "data-node").await.filter(|n| n == "hk-01")
    })
    .await;
    assert_eq!(node, "hk-01");
    assert_eq!(js(c, "return document.documentElement.dataset.loadId").await, load_id, "the page was not reloaded");
    assert_eq!(js(c, "return window.__e2eMarker || null").await, json!("still-here"), "the page was not reloaded");
    screenshot(c, "matrix-after-offline").await;

    // The page's own action (admin cookie): gz-01 back online, the cell back to it.
    tab(c, "nodes").await;
    click(c, r#"#nodes tr[data-node="gz-01"] button[data-act="online"]"#).await;
    tab(c, "matrix").await;
    wait_for(Duration::from_secs(20), "广东/电信 back on gz-01", || async {
        attr(c, GD_TELECOM, "data-node").await.filter(|n| n == "gz-01")
    })
    .await;
    let (_, n) = d.http("GET", "/api/v1/nodes/gz-01", None, &admin_h);
    assert_eq!(n["status"], "online");

    // Traffic and changes: queries sampled into the chart, the two changes on
    // the timeline, the local NS host.
    let started = Instant::now();
    let traffic = wait_for(Duration::from_secs(20), "queries in the traffic history", || async {
        for _ in 0..10 {
            d.dig(&["edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
        }
        let (_, t) = d.http("GET", "/api/v1/console/traffic", None, &admin_h);
        let busy = t["points"].as_array()?.iter().any(|p| p["userspace_qps"].as_f64().is_some_and(|q| q > 0.0));
        (busy && started.elapsed() > Duration::from_secs(4)).then_some(t)
    })
    .await;
    assert!(traffic["points"].as_array().unwrap().iter().all(|p| p["xdp_qps"] == 0.0), "no XDP here: {traffic}");
    tab(c, "traffic").await;
    let changes = wait_for(Duration::from_secs(20), "the change log", || async {
        let t = c.find(Locator::Css("#changes")).await.ok()?.text().await.ok()?;
        (t.contains("hk-01") && t.contains("gz-01")).then_some(t)
    })
    .await;
    assert!(changes.contains("edge.lagran.net"), "{changes}");
    let ns = c.find(Locator::Css("#nshosts")).await.unwrap().text().await.unwrap();
    assert!(ns.contains("local"), "the local responder's table version: {ns}");
    c.find(Locator::Css("#qps svg")).await.expect("the qps chart");
    wait_for(Duration::from_secs(10), "the timeline's changes", || async {
        let n = c.find_all(Locator::Css("#timeline circle")).await.ok()?.len();
        (n >= 2).then_some(n)
    })
    .await;
    screenshot(c, "traffic").await;
    assert_eq!(js(c, "return window.__e2eMarker || null").await, json!("still-here"), "never reloaded");
}

/// The console's authentication over plain HTTP: the login form, the cookie,
/// and what each token may do with it.
#[test]
fn console_login_keeps_a_session_in_a_strict_http_only_cookie() {
    let d = Daemon::start(Options {
        env: vec![("ADMIN_TOKEN".into(), ADMIN.into()), ("AGENT_TOKEN".into(), AGENT.into())],
        ..Options::default()
    });
    let base = format!("http://{}", d.api);
    let agent = ureq::AgentBuilder::new().redirects(0).timeout(Duration::from_secs(10)).build();
    let page = agent.get(&format!("{base}/ui")).call().unwrap().into_string().unwrap();
    assert!(page.contains("name=\"token\"") && !page.contains("data-province"), "a login form, not the console");

    let login = |token: &str| match agent.post(&format!("{base}/ui/login")).send_form(&[("token", token)]) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(login("wrong").status(), 401);
    let r = login(AGENT);
    assert_eq!(r.status(), 303);
    assert_eq!(r.header("location"), Some("/ui"));
    let set = r.header("set-cookie").unwrap().to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    let agent_cookie = set.split(';').next().unwrap().to_string();
    let admin_cookie = {
        let r = login(ADMIN);
        r.header("set-cookie").unwrap().split(';').next().unwrap().to_string()
    };
    for (cookie, token) in [(&agent_cookie, AGENT), (&admin_cookie, ADMIN)] {
        assert!(
            cookie.starts_with("lagran_session=") && !cookie.contains(token),
            "a session id, not the token: {cookie}"
        );
    }

    let call = |method: &str, path: &str, cookie: Option<&str>, body: Option<Value>| {
        let mut req = agent.request(method, &format!("{base}{path}"));
        if let Some(c) = cookie {
            req = req.set("cookie", c);
        }
        let res = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        let r = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: {e}"),
        };
        let status = r.status();
        (status, serde_json::from_str::<Value>(&r.into_string().unwrap()).unwrap_or(Value::Null))
    };
    let page = agent.get(&format!("{base}/ui")).set("cookie", &agent_cookie).call().unwrap().into_string().unwrap();
    assert!(page.contains("data-province"), "the console with the cookie");
    assert_eq!(call("GET", "/api/v1/console/matrix", None, None).0, 401);
    let (s, m) = call("GET", "/api/v1/console/matrix?domain=edge.lagran.net", Some(&agent_cookie), None);
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["rows"].as_array().unwrap().len(), 36);
    let (_, sess) = call("GET", "/api/v1/console/session", Some(&agent_cookie), None);
    assert_eq!((sess["read"].clone(), sess["write"].clone()), (json!(true), json!(false)));
    // The agent token reads (what-if included) but never writes.
    let wi = json!({"domain": "edge.lagran.net", "changes": [{"node": "gz-01", "status": "offline"}]});
    assert_eq!(call("POST", "/api/v1/schedule/what-if", None, Some(wi.clone())).0, 401);
    let (s, w) = call("POST", "/api/v1/schedule/what-if", Some(&agent_cookie), Some(wi.clone()));
    assert_eq!(s, 200, "{w}");
    assert_eq!(w["published"], false);
    let gd = w["moves"].as_array().unwrap().iter().find(|m| m["province"] == "广东" && m["isp"] == "电信");
    assert_eq!(gd.map(|m| (m["from"].clone(), m["to"].clone())), Some((json!("gz-01"), json!("hk-01"))), "{w}");
    let (s, e) = call("PATCH", "/api/v1/nodes/gz-01", Some(&agent_cookie), Some(json!({"weight": 0})));
    assert_eq!(s, 401, "{e}");
    let (s, n) = call("PATCH", "/api/v1/nodes/gz-01", Some(&admin_cookie), Some(json!({"weight": 0})));
    assert_eq!(s, 200, "{n}");
    assert_eq!(n["weight"], 0);
    // Drained: 广东/电信 moves off gz-01, which stays eligible.
    let (_, m) = call("GET", "/api/v1/console/matrix?domain=edge.lagran.net", Some(&admin_cookie), None);
    let cell = m["cells"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap())
        .find(|c| c["province"] == "广东" && c["isp"] == "电信")
        .unwrap()
        .clone();
    assert_eq!(cell["node"], "hk-01", "{cell}");
    let (_, nodes) = call("GET", "/api/v1/console/nodes", Some(&admin_cookie), None);
    let gz = nodes.as_array().unwrap().iter().find(|n| n["name"] == "gz-01").unwrap();
    assert_eq!(gz["drained"], true);
    // Bad what-ifs name the field.
    let (s, e) = call(
        "POST",
        "/api/v1/schedule/what-if",
        Some(&agent_cookie),
        Some(json!({"domain": "edge.lagran.net", "changes": [{"node": "nope", "status": "offline"}]})),
    );
    assert_eq!((s, e["field"].clone()), (422, json!("changes[0].node")), "{e}");
    let (s, e) = call(
        "POST",
        "/api/v1/schedule/what-if",
        Some(&agent_cookie),
        Some(json!({"domain": "nope.example", "changes": [{"node": "gz-01", "weight": 5}]})),
    );
    assert_eq!((s, e["field"].clone()), (422, json!("domain")), "{e}");
    // Logging out clears the cookie and ends the session on the server.
    let r = agent.post(&format!("{base}/ui/logout")).set("cookie", &admin_cookie).call().unwrap_or_else(|e| match e {
        ureq::Error::Status(_, r) => r,
        e => panic!("{e}"),
    });
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    let (s, _) = call("PATCH", "/api/v1/nodes/gz-01", Some(&admin_cookie), Some(json!({"weight": 100})));
    assert_eq!(s, 401, "a signed-out session no longer writes");
    // Failed logins are throttled per address: the sixth within a minute waits, even with the right token.
    for _ in 0..4 {
        assert_eq!(login("wrong").status(), 401);
    }
    assert_eq!(login("wrong").status(), 429, "the sixth failure");
    assert_eq!(login(ADMIN).status(), 429, "the address waits, whatever it sends");
}
