//! The servers of the edge comparison: the origin (nginx serving static files),
//! lagran-edge, nginx with `proxy_cache` and Varnish, each configured for the same
//! site and origin in the run's directory, with its access log and a disk-backed
//! cache, pinned to the server CPU. lagran-edge and nginx also serve the site
//! over TLS (HTTP/1.1 and HTTP/2 by ALPN on one listener) with the same
//! self-signed certificate; Varnish has no TLS. The three run side by side,
//! each with its own ports and its own subdirectory of the run's directory.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::process::{Bg, tail};

/// The site every server is configured for; clients send it as Host.
pub(super) const SITE: &str = "bench.test";
pub(super) const SMALL: &str = "/1k.bin";
pub(super) const LARGE: &str = "/1m.bin";
/// The miss-storm object: 1 MiB served at 2 MB/s, so a fetch lasts ~0.5 s and
/// the clients of the storm arrive while it is still in flight.
pub(super) const STORM: &str = "/storm/1m.bin";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum EdgeServer {
    Lagran,
    Nginx,
    Varnish,
}

impl EdgeServer {
    pub(super) const ALL: [EdgeServer; 3] = [EdgeServer::Lagran, EdgeServer::Nginx, EdgeServer::Varnish];

    pub(super) fn label(self) -> &'static str {
        match self {
            EdgeServer::Lagran => "lagran-edge",
            EdgeServer::Nginx => "nginx proxy_cache",
            EdgeServer::Varnish => "varnish",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            EdgeServer::Lagran => "lagran",
            EdgeServer::Nginx => "nginx",
            EdgeServer::Varnish => "varnish",
        }
    }
}

/// A running server: its processes (the first is the one whose process tree
/// is measured for memory), and where it speaks HTTP/1.1, h2c and TLS (none
/// for Varnish).
pub(super) struct Running {
    pub(super) procs: Vec<Bg>,
    pub(super) h1: u16,
    pub(super) h2: u16,
    pub(super) tls: Option<u16>,
}

/// The site's self-signed certificate (P-256, for `SITE`) and its key, written
/// with `openssl` into `dir/tls`; the same files for every server.
pub(super) fn self_signed(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let d = dir.join("tls");
    std::fs::create_dir_all(&d)?;
    let (cert, key) = (d.join("cert.pem"), d.join("key.pem"));
    let mut cmd = Command::new("openssl");
    cmd.args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]);
    cmd.args(["-subj", &format!("/CN={SITE}"), "-addext", &format!("subjectAltName=DNS:{SITE}")]);
    cmd.arg("-keyout").arg(&key).arg("-out").arg(&cert);
    crate::util::output(&mut cmd).context("making the self-signed certificate with openssl")?;
    Ok((cert, key))
}

/// A free loopback port (bound, then released for the server to take).
pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(free_ports::<1>()?[0])
}

/// `N` distinct free loopback ports: all bound at once (so none is handed
/// out twice), then released for a server to take.
fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let mut held = Vec::with_capacity(N);
    let mut ports = [0; N];
    for port in &mut ports {
        let l = TcpListener::bind("127.0.0.1:0")?;
        *port = l.local_addr()?.port();
        held.push(l);
    }
    Ok(ports)
}

/// The origin: nginx serving the objects with `Cache-Control: max-age=3600`,
/// logging every request (the storm's fetches are counted from its log).
pub(super) fn start_origin(dir: &Path, nginx: &Path, cpu: u32) -> anyhow::Result<(Bg, u16)> {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("storm"))?;
    std::fs::write(www.join("1k.bin"), vec![b'a'; 1024])?;
    std::fs::write(www.join("1m.bin"), vec![b'b'; 1 << 20])?;
    std::fs::write(www.join("storm/1m.bin"), vec![b'c'; 1 << 20])?;
    let port = free_port()?;
    let server = format!(
        "server {{\n listen 127.0.0.1:{port} backlog=4096;\n root {www};\n\
         location / {{ add_header Cache-Control \"max-age=3600\"; }}\n\
         location /storm/ {{ limit_rate 2m; add_header Cache-Control \"max-age=3600\"; }}\n}}\n",
        www = www.display()
    );
    let mut bg = start_nginx(dir, nginx, "origin", &server, cpu)?;
    wait_ready(&mut bg, port, SMALL)?;
    Ok((bg, port))
}

/// Writes an nginx configuration around `server_block` and starts it in the
/// foreground with one worker.
fn start_nginx(dir: &Path, nginx: &Path, name: &str, server_block: &str, cpu: u32) -> anyhow::Result<Bg> {
    let d = dir.join(name);
    std::fs::create_dir_all(&d)?;
    let dd = d.display();
    let conf = format!(
        "user root;\ndaemon off;\nworker_processes 1;\nworker_rlimit_nofile 20000;\npid {dd}/nginx.pid;\n\
         error_log {dd}/error.log warn;\nevents {{ worker_connections 8192; }}\n\
         http {{\n access_log {dd}/access.log;\n client_body_temp_path {dd}/body;\n proxy_temp_path {dd}/proxy;\n\
         fastcgi_temp_path {dd}/fastcgi;\n uwsgi_temp_path {dd}/uwsgi;\n scgi_temp_path {dd}/scgi;\n\
         keepalive_requests 1000000;\n{server_block}}}\n"
    );
    let path = d.join("nginx.conf");
    std::fs::write(&path, conf)?;
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(cpu.to_string()).arg(nginx).arg("-p").arg(&d).arg("-c").arg(&path);
    cmd.arg("-e").arg(d.join("error.log"));
    Bg::spawn(&format!("nginx ({name})"), &mut cmd, &dir.join(format!("{name}.log")))
}

pub(super) struct Tools<'a> {
    pub(super) dir: &'a Path,
    pub(super) edge: &'a Path,
    pub(super) nginx: &'a Path,
    pub(super) varnishd: &'a Path,
    pub(super) varnishncsa: &'a Path,
    pub(super) origin: u16,
    pub(super) cpu: u32,
    /// The certificate and key of the TLS listeners.
    pub(super) cert: &'a Path,
    pub(super) key: &'a Path,
}

/// Starts `server` for the site on free ports, waits until it serves the small object.
pub(super) fn start(server: EdgeServer, t: &Tools) -> anyhow::Result<Running> {
    // The servers already running hold their ports; the new one's are distinct.
    let [h1, h2, tls] = free_ports()?;
    let mut running = match server {
        EdgeServer::Lagran => Running { procs: vec![start_lagran(t, h1, tls)?], h1, h2: h1, tls: Some(tls) },
        EdgeServer::Nginx => Running { procs: vec![start_nginx_cache(t, h1, h2, tls)?], h1, h2, tls: Some(tls) },
        EdgeServer::Varnish => Running { procs: start_varnish(t, h1)?, h1, h2: h1, tls: None },
    };
    wait_ready(&mut running.procs[0], running.h1, SMALL)?;
    Ok(running)
}

fn start_lagran(t: &Tools, port: u16, tls: u16) -> anyhow::Result<Bg> {
    let d = t.dir.join("lagran");
    std::fs::create_dir_all(&d)?;
    let conf = format!(
        // The generators are one client address: lift the per-client connection
        // cap (64) as nginx and Varnish have none, so the miss storm's 1 000
        // connections all reach the cache.
        "listen_http = \"127.0.0.1:{port}\"\nlisten_https = \"127.0.0.1:{tls}\"\nmax_connections_per_client = 5000\n\
         cache_dir = \"{dd}/cache\"\ncache_disk_max_bytes = 1073741824\n\
         access_log = \"{dd}/access.log\"\n\n[[site]]\nhost = \"{SITE}\"\norigin = \"http://127.0.0.1:{o}\"\n\
         cert_pem = \"{cert}\"\nkey_pem = \"{key}\"\n",
        dd = d.display(),
        o = t.origin,
        cert = t.cert.display(),
        key = t.key.display(),
    );
    let path = d.join("edge.toml");
    std::fs::write(&path, conf)?;
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(t.cpu.to_string()).arg(t.edge).arg("--config").arg(&path).env("RUST_LOG", "warn");
    Bg::spawn("lagran-edge", &mut cmd, &t.dir.join("lagran.log"))
}

/// nginx as a cache: on-disk `proxy_cache`, concurrent misses held behind one
/// fetch (`proxy_cache_lock`), HTTP/1.1 on one port, h2c (prior knowledge:
/// nginx's `http2` on a plain listener speaks only HTTP/2) on another, and TLS
/// with HTTP/2 and HTTP/1.1 by ALPN on a third.
fn start_nginx_cache(t: &Tools, h1: u16, h2: u16, tls: u16) -> anyhow::Result<Bg> {
    let cache = t.dir.join("nginx/cache");
    let server = format!(
        "proxy_cache_path {c} levels=1:2 keys_zone=edge:16m max_size=1g inactive=1h use_temp_path=off;\n\
         upstream origin {{ server 127.0.0.1:{o}; keepalive 32; }}\n\
         server {{\n listen 127.0.0.1:{h1} backlog=4096;\n listen 127.0.0.1:{h2} http2 backlog=4096;\n\
          listen 127.0.0.1:{tls} ssl http2 backlog=4096;\n ssl_certificate {cert};\n ssl_certificate_key {key};\n\
         location / {{\n  proxy_pass http://origin;\n  proxy_http_version 1.1;\n  proxy_set_header Connection \"\";\n\
           proxy_set_header Host $host;\n  proxy_cache edge;\n  proxy_cache_lock on;\n  proxy_cache_lock_timeout 30s;\n }}\n}}\n",
        c = cache.display(),
        o = t.origin,
        cert = t.cert.display(),
        key = t.key.display(),
    );
    start_nginx(t.dir, t.nginx, "nginx", &server, t.cpu)
}

/// varnishd in the foreground (`-F`, no privilege separation: `-j none`) with
/// its file storage (its disk tier) and HTTP/2, and varnishncsa writing its
/// access log, both on the server CPU.
fn start_varnish(t: &Tools, port: u16) -> anyhow::Result<Vec<Bg>> {
    let d = t.dir.join("varnish");
    std::fs::create_dir_all(&d)?;
    let vcl = d.join("edge.vcl");
    std::fs::write(&vcl, format!("vcl 4.1;\nbackend origin {{ .host = \"127.0.0.1\"; .port = \"{}\"; }}\n", t.origin))?;
    let cpu = t.cpu.to_string();
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &cpu]).arg(t.varnishd).args(["-F", "-j", "none", "-n"]).arg(d.join("work"));
    cmd.arg("-a").arg(format!("127.0.0.1:{port}")).arg("-f").arg(&vcl);
    cmd.arg("-s").arg(format!("file,{},1G", d.join("storage.bin").display()));
    cmd.args(["-p", "feature=+http2", "-p", "listen_depth=4096"]);
    let mut varnishd = Bg::spawn("varnishd", &mut cmd, &t.dir.join("varnish.log"))?;
    wait_ready(&mut varnishd, port, SMALL)?;
    let mut ncsa = Command::new("taskset");
    ncsa.args(["-c", &cpu]).arg(t.varnishncsa).arg("-n").arg(d.join("work"));
    ncsa.arg("-w").arg(d.join("access.log"));
    let ncsa = Bg::spawn("varnishncsa", &mut ncsa, &t.dir.join("varnishncsa.log"))?;
    Ok(vec![varnishd, ncsa])
}

/// One HTTP/1.1 GET for the site; the status code.
pub(super) fn get_status(port: u16, path: &str) -> anyhow::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {SITE}\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&head);
    text.get(9..12).and_then(|c| c.parse().ok()).with_context(|| format!("not an HTTP response: {text:?}"))
}

/// Waits (at most 20 s) until `port` answers 200 for `path`.
fn wait_ready(bg: &mut Bg, port: u16, path: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        super::check_interrupted()?;
        bg.check_alive()?;
        match get_status(port, path) {
            Ok(200) => return Ok(()),
            Ok(code) if start.elapsed() > Duration::from_secs(20) => bail!("{} answers {code} for {path}", bg.name),
            _ if start.elapsed() > Duration::from_secs(20) => {
                bail!(
                    "{} did not answer within 20 s; last lines of {}:\n{}",
                    bg.name,
                    bg.log.display(),
                    tail(&bg.log, 20)
                )
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The storm's query string for `server`: each server gets its own uncached object.
pub(super) fn storm_path(server: EdgeServer) -> String {
    format!("{STORM}?for={}", server.slug())
}

/// Requests for `server`'s storm object in the origin's access log.
pub(super) fn origin_fetches(dir: &Path, server: EdgeServer) -> anyhow::Result<usize> {
    let log: PathBuf = dir.join("origin/access.log");
    let text = std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
    let needle = storm_path(server);
    Ok(text.lines().filter(|l| l.contains(&needle)).count())
}
