//! The kernel's smoothed round-trip time of a TCP connection (`TCP_INFO`'s
//! `tcpi_rtt`, in microseconds). Linux only: other systems lay the structure out
//! differently (or name it otherwise), and there the edge simply measures nothing.

use std::io;
use std::time::Duration;

/// The smoothed RTT the kernel keeps for the connection on `fd`; `None` before the
/// kernel has a sample (`tcpi_rtt` is 0) or where `TCP_INFO` is not read.
#[cfg(target_os = "linux")]
pub fn smoothed_rtt(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Option<Duration>> {
    use std::os::fd::AsRawFd;
    // SAFETY: `tcp_info` is plain old data, valid all-zero.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, which outlives the call; the
    // kernel writes at most `len` bytes and reports how many in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.tcpi_rtt > 0).then(|| Duration::from_micros(u64::from(info.tcpi_rtt))))
}

/// Elsewhere no RTT is read.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn smoothed_rtt(_fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Option<Duration>> {
    Ok(None)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn a_loopback_connection_has_a_plausible_rtt() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        for _ in 0..5 {
            client.write_all(b"ping").unwrap();
            server.read_exact(&mut buf).unwrap();
            server.write_all(b"pong").unwrap();
            client.read_exact(&mut buf).unwrap();
        }
        let rtt = smoothed_rtt(server.as_fd()).unwrap().expect("the kernel has RTT samples after an exchange");
        assert!(rtt > Duration::ZERO && rtt < Duration::from_millis(100), "loopback RTT {rtt:?}");
    }

    #[test]
    fn a_socket_that_is_not_tcp_is_an_error() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(smoothed_rtt(udp.as_fd()).is_err());
    }
}
