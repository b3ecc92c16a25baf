//! The target's exchanges with its upstreams: a request sent on a
//! connection the target opened (a backend, a database, a cache), and the
//! reply read back. A server waiting for one is not idle: the requests
//! that depend on it wait on the upstream.

use std::net::{Ipv4Addr, Ipv6Addr};

use correlator_common::UpstreamRecord;
use serde::{Deserialize, Serialize};

/// One request→reply exchange on an upstream connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamExchange {
    /// The thread that sent the request, and the one that read the reply.
    pub tid: u32,
    pub reader_tid: u32,
    /// The upstream, `address:port` (`[v6]:port` for IPv6).
    pub peer: String,
    /// The connection's number (exchanges on one connection share it).
    pub conn: u32,
    pub bytes_out: u32,
    /// When the request's first bytes were sent.
    pub sent_ns: u64,
    /// When the reply's first bytes arrived in the socket (`None`: the
    /// kernel has no `sk_data_ready` tracepoint, or the arrival was missed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrived_ns: Option<u64>,
    /// When the target first read the reply.
    pub read_ns: u64,
}

impl UpstreamExchange {
    /// When the upstream's reply was there: its arrival, else its read.
    pub fn replied_ns(&self) -> u64 {
        self.arrived_ns.unwrap_or(self.read_ns)
    }

    /// How long the upstream took to reply, as the target saw it.
    pub fn reply_ns(&self) -> u64 {
        self.replied_ns().saturating_sub(self.sent_ns)
    }
}

impl From<&UpstreamRecord> for UpstreamExchange {
    fn from(r: &UpstreamRecord) -> Self {
        Self {
            tid: r.tid,
            reader_tid: r.reader_tid,
            peer: peer(r.family, &r.addr, r.port),
            conn: r.conn,
            bytes_out: r.bytes_out,
            sent_ns: r.sent_ns,
            arrived_ns: (r.arrived_ns != 0).then_some(r.arrived_ns),
            read_ns: r.read_ns,
        }
    }
}

/// `AF_INET` (else IPv6).
const AF_INET: u16 = 2;

/// The peer as `address:port`; an IPv4-mapped IPv6 address as IPv4.
fn peer(family: u16, addr: &[u8; 16], port: u16) -> String {
    if family == AF_INET {
        return format!(
            "{}:{port}",
            Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3])
        );
    }
    let v6 = Ipv6Addr::from(*addr);
    match v6.to_ipv4_mapped() {
        Some(v4) => format!("{v4}:{port}"),
        None => format!("[{v6}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_read_as_users_write_them() {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(peer(2, &a, 5432), "127.0.0.1:5432");
        let mapped = Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped().octets();
        assert_eq!(peer(10, &mapped, 80), "10.1.2.3:80");
        assert_eq!(peer(10, &Ipv6Addr::LOCALHOST.octets(), 443), "[::1]:443");
    }

    #[test]
    fn the_reply_is_timed_to_its_arrival_when_seen() {
        let mut e = UpstreamExchange {
            tid: 1,
            reader_tid: 1,
            peer: "127.0.0.1:1".into(),
            conn: 0,
            bytes_out: 10,
            sent_ns: 1_000,
            arrived_ns: Some(21_000),
            read_ns: 30_000,
        };
        assert_eq!(e.reply_ns(), 20_000);
        e.arrived_ns = None;
        assert_eq!(e.reply_ns(), 29_000);
    }
}
