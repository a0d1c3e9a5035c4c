//! The HTTP/1.1 hit path: hits answered without hyper, byte for byte as
//! hyper's flow answers them, and connections handed to hyper intact at the
//! first request the path declines.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Origin, STATIC_BODY, TIMEOUT, TestEdge, get, sites, start_edge, start_origin};

/// One response as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The header lines, in order, as sent.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.iter().find(|(n, _)| n == name).map_or("", |(_, v)| v.as_str())
    }
}

/// Reads one response per request off `s`; `heads[i]`: whether request `i`
/// was a `HEAD` (its answer has a `Content-Length` but no body).
async fn read_answers(s: &mut TcpStream, heads: &[bool]) -> Vec<Answer> {
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    while answers.len() < heads.len() {
        if let Some((answer, len)) = parse(&buf, heads[answers.len()]) {
            buf.drain(..len);
            answers.push(answer);
            continue;
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout(TIMEOUT, s.read(&mut chunk)).await.expect("answers within the timeout");
        let got = read.unwrap();
        assert!(got > 0, "closed after {} answers: {:?}", answers.len(), String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..got]);
    }
    assert!(buf.is_empty(), "nothing more than the answers: {:?}", String::from_utf8_lossy(&buf));
    answers
}

/// The response at the start of `buf` and its length, once it is all there.
fn parse(buf: &[u8], head_only: bool) -> Option<(Answer, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end - 4]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.map(|l| l.split_once(": ").unwrap()).map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned())).collect();
    let stated = headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
    let len = if head_only { 0 } else { stated };
    (buf.len() >= end + len).then(|| (Answer { status, headers, body: buf[end..end + len].to_vec() }, end + len))
}

fn hit_path_requests(edge: &TestEdge) -> u64 {
    edge.edge.stats.hit_path_requests.load(Ordering::Relaxed)
}

/// The test origin and an edge in front of it that has cached `paths` of `cdn.test`.
async fn edge_with_cached(paths: &[&str]) -> (Origin, TestEdge) {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    for path in paths {
        assert_eq!(get(edge.addr, "cdn.test", path, &[]).await.header("x-cache"), "MISS");
    }
    (origin, edge)
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

#[tokio::test]
async fn a_hit_on_the_hit_path_is_the_answer_hyper_gives_byte_for_byte_but_its_age() {
    let (origin, edge) = edge_with_cached(&["/static.txt"]).await;
    let mut s = connect(edge.addr).await;
    s.write_all(b"GET /static.txt HTTP/1.1\r\nHost: cdn.test\r\n\r\n").await.unwrap();
    let fast = read_answers(&mut s, &[false]).await.remove(0);
    assert_eq!(hit_path_requests(&edge), 1, "answered on the hit path");

    // A validator that does not match: the hit path declines it, hyper's flow answers the whole object.
    let declined = "GET /static.txt HTTP/1.1\r\nHost: cdn.test\r\nIf-None-Match: \"other\"\r\n\r\n";
    s.write_all(declined.as_bytes()).await.unwrap();
    let full = read_answers(&mut s, &[false]).await.remove(0);
    assert_eq!(hit_path_requests(&edge), 1, "answered by hyper");
    assert_eq!(origin.hits("/static.txt"), 1, "both from the cache");

    assert_eq!((fast.status, fast.header("x-cache"), fast.body.as_slice()), (200, "HIT", STATIC_BODY.as_bytes()));
    let but_age = |a: &Answer| a.headers.iter().filter(|(n, _)| n != "age").cloned().collect::<Vec<_>>();
    assert_eq!(but_age(&fast), but_age(&full), "the same headers, in the same order");
    assert_eq!(fast.body, full.body);
    assert!(fast.header("age").parse::<u64>().is_ok());
    assert!(!fast.header("date").is_empty(), "the origin's date, as stored");
}

#[tokio::test]
async fn pipelined_requests_get_their_answers_in_order_across_the_hand_over_to_hyper() {
    let (_origin, edge) = edge_with_cached(&["/static.txt", "/big"]).await;
    let mut s = connect(edge.addr).await;
    let requests = [
        "GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n",
        "HEAD /big HTTP/1.1\r\nhost: cdn.test\r\nconnection: keep-alive\r\n\r\n",
        "GET /big HTTP/1.1\r\nhost: cdn.test\r\nrange: bytes=10-14\r\n\r\n",
        "GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n",
        "GET /nostore HTTP/1.1\r\nhost: cdn.test\r\n\r\n",
    ];
    s.write_all(requests.concat().as_bytes()).await.unwrap();
    let answers = read_answers(&mut s, &[false, true, false, false, false]).await;
    let seen: Vec<_> = answers.iter().map(|a| (a.status, a.header("x-cache"))).collect();
    assert_eq!(seen, [(200, "HIT"), (200, "HIT"), (206, "HIT"), (200, "HIT"), (200, "MISS")]);
    assert_eq!(answers[0].body, STATIC_BODY.as_bytes());
    assert_eq!((answers[1].header("content-length"), answers[1].body.len()), ("1000", 0));
    assert_eq!((answers[2].header("content-range"), answers[2].body.as_slice()), ("bytes 10-14/1000", &b"01234"[..]));
    assert_eq!(answers[3].body, STATIC_BODY.as_bytes());
    assert_eq!(answers[4].body, b"fresh every time");
    assert_eq!(hit_path_requests(&edge), 2, "the GET and the HEAD before the range; hyper from the range on");
}

#[tokio::test]
async fn a_head_split_across_reads_goes_to_hyper_and_is_answered() {
    let (_origin, edge) = edge_with_cached(&["/static.txt"]).await;
    let mut s = connect(edge.addr).await;
    s.write_all(b"GET /static.txt HTTP/1.1\r\nHo").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.write_all(b"st: cdn.test\r\n\r\nGET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n").await.unwrap();
    let answers = read_answers(&mut s, &[false, false]).await;
    for a in &answers {
        assert_eq!((a.status, a.header("x-cache"), a.body.as_slice()), (200, "HIT", STATIC_BODY.as_bytes()));
    }
    assert_eq!(hit_path_requests(&edge), 0, "hyper has the connection from the split head on");
}

#[tokio::test]
async fn requests_the_full_flow_refuses_are_refused_as_before() {
    let (_origin, edge) = edge_with_cached(&["/static.txt"]).await;
    let cases: [(&str, StatusCode); 5] = [
        ("GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\nuser-agent: BadBot/1\r\n\r\n", StatusCode::FORBIDDEN),
        ("GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\nreferer: https://evil.test/\r\n\r\n", StatusCode::FORBIDDEN),
        ("GET /static.txt HTTP/1.1\r\nhost: nowhere.test\r\n\r\n", StatusCode::MISDIRECTED_REQUEST),
        ("GET /static.txt HTTP/1.1\r\n\r\n", StatusCode::BAD_REQUEST),
        ("GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\nreferer: https://a.good.test/\r\n\r\n", StatusCode::OK),
    ];
    for (request, status) in cases {
        let mut s = connect(edge.addr).await;
        s.write_all(request.as_bytes()).await.unwrap();
        let a = read_answers(&mut s, &[false]).await.remove(0);
        assert_eq!(a.status, status.as_u16(), "{request:?}");
    }
    assert_eq!(hit_path_requests(&edge), 1, "only the allowed referer's hit took the hit path");
}

#[tokio::test]
async fn a_hit_path_connection_waiting_for_its_next_request_is_closed_at_shutdown() {
    let (_origin, edge) = edge_with_cached(&["/static.txt"]).await;
    let mut s = connect(edge.addr).await;
    s.write_all(b"GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n").await.unwrap();
    assert_eq!(read_answers(&mut s, &[false]).await[0].status, 200);
    assert_eq!(hit_path_requests(&edge), 1);
    edge.shutdown.cancel();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0))), "closed at once, nothing more sent: {closed:?} {rest:?}");
    let ended = tokio::time::timeout(Duration::from_secs(3), edge.task).await;
    assert!(ended.is_ok(), "the server is done without waiting out its drain time");
}
