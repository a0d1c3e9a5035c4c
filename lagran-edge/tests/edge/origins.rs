//! Origins a test scripts: a handler per request, a hit counter, TLS with a
//! private CA, and a switch that kills the origin with its open connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub type Handler = Arc<dyn Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync>;

/// What a scripted origin saw.
#[derive(Default)]
pub struct Seen {
    pub hits: AtomicUsize,
    pub versions: Mutex<Vec<Version>>,
    pub sni: Mutex<Vec<String>>,
}

pub struct Scripted {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    task: JoinHandle<()>,
}

impl Scripted {
    pub fn hits(&self) -> usize {
        self.seen.hits.load(Ordering::SeqCst)
    }

    /// Stops accepting and closes every open connection.
    pub fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn handler(f: impl Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static) -> Handler {
    Arc::new(f)
}

/// A response with `body` and `headers`.
pub fn reply(body: impl Into<Bytes>, headers: &[(&str, &str)]) -> Response<Full<Bytes>> {
    let mut b = Response::builder();
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(body.into())).unwrap()
}

/// Serves `handler` on `bind` (plain, or TLS with `tls`), each answer after `delay`.
pub async fn scripted(
    bind: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
    delay: Duration,
    handler: Handler,
) -> Scripted {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Seen> = Arc::default();
    let counted = seen.clone();
    let task = tokio::spawn(async move {
        // Dropped with the task: aborts every connection.
        let mut conns = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (seen, handler, tls) = (counted.clone(), handler.clone(), tls.clone());
            conns.spawn(async move {
                let sni = seen.clone();
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (seen, handler) = (seen.clone(), handler.clone());
                    async move {
                        seen.hits.fetch_add(1, Ordering::SeqCst);
                        seen.versions.lock().unwrap().push(req.version());
                        tokio::time::sleep(delay).await;
                        Ok::<_, Infallible>(handler(&req))
                    }
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                match tls {
                    None => _ = builder.serve_connection(TokioIo::new(stream), svc).await,
                    Some(config) => {
                        let Ok(tls) = tokio_rustls::TlsAcceptor::from(config).accept(stream).await else { return };
                        if let Some(name) = tls.get_ref().1.server_name() {
                            sni.sni.lock().unwrap().push(name.to_owned());
                        }
                        _ = builder.serve_connection(TokioIo::new(tls), svc).await;
                    }
                }
            });
        }
    });
    Scripted { addr, seen, task }
}

/// A private CA written to `dir/ca.pem`, and a server config for `name` signed by
/// it that offers HTTP/2 and HTTP/1.1.
pub fn private_ca(dir: &Path, name: &str) -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "lagran test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![name.to_owned()]).unwrap().signed_by(&leaf_key, &ca, &ca_key).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (ca_path.display().to_string(), Arc::new(config))
}
