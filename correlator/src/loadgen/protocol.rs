//! Request encoding and incremental response parsing for the protocols the
//! load generator speaks. Parsers take whatever bytes have arrived and say
//! how many make up the next complete response, so pipelined responses on
//! one connection are matched to requests in order.
//!
//! One piece on purpose (over 450 lines): each protocol's encoder sits
//! beside its incremental parser, and all share one trait.

use anyhow::{Context as _, Result, bail};

/// What to send, by URL scheme.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `http://host:port/path`: HTTP/1.1 keep-alive GET.
    Http { host: String, path: String },
    /// `redis://host:port`: RESP.
    Redis(KvOp),
    /// `memcache://host:port`: text protocol.
    Memcache(KvOp),
    /// `tcp://host:port`: one newline-terminated line out, one line back.
    Line,
}

/// Key-value operation for redis and memcache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// Redis PING (memcache: `version`).
    Ping,
    /// GET over `keys` keys.
    Get { keys: u64 },
    /// SET over `keys` keys with values of `value_size` bytes.
    Set { keys: u64, value_size: usize },
}

/// A parsed target: protocol and socket address.
#[derive(Clone, Debug)]
pub struct Target {
    pub protocol: Protocol,
    pub addr: String,
}

impl Target {
    /// Parses `scheme://host:port[/path]`.
    pub fn parse(url: &str, op: &KvOp) -> Result<Self> {
        let (scheme, rest) = url.split_once("://").with_context(|| {
            format!("{url}: expected scheme://host:port (http, redis, memcache, tcp)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if !authority.contains(':') {
            bail!("{url}: missing port (e.g. {scheme}://127.0.0.1:8080)");
        }
        let protocol = match scheme {
            "http" => Protocol::Http {
                host: authority.to_string(),
                path: path.to_string(),
            },
            "redis" => Protocol::Redis(op.clone()),
            "memcache" => Protocol::Memcache(op.clone()),
            "tcp" => Protocol::Line,
            other => bail!("{url}: unknown scheme {other}; use http, redis, memcache or tcp"),
        };
        Ok(Self {
            protocol,
            addr: authority.to_string(),
        })
    }
}

impl Protocol {
    /// Appends request number `seq` to `out`.
    pub fn encode(&self, seq: u64, out: &mut Vec<u8>) {
        match self {
            Protocol::Http { host, path } => {
                out.extend_from_slice(
                    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
                );
            }
            Protocol::Redis(op) => match op {
                KvOp::Ping => out.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
                KvOp::Get { keys } => {
                    let key = format!("key:{}", seq % keys.max(&1));
                    out.extend_from_slice(
                        format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).as_bytes(),
                    );
                }
                KvOp::Set { keys, value_size } => {
                    let key = format!("key:{}", seq % keys.max(&1));
                    out.extend_from_slice(
                        format!(
                            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_size}\r\n",
                            key.len()
                        )
                        .as_bytes(),
                    );
                    out.resize(out.len() + value_size, b'x');
                    out.extend_from_slice(b"\r\n");
                }
            },
            Protocol::Memcache(op) => match op {
                KvOp::Ping => out.extend_from_slice(b"version\r\n"),
                KvOp::Get { keys } => {
                    out.extend_from_slice(format!("get key:{}\r\n", seq % keys.max(&1)).as_bytes());
                }
                KvOp::Set { keys, value_size } => {
                    out.extend_from_slice(
                        format!("set key:{} 0 0 {value_size}\r\n", seq % keys.max(&1)).as_bytes(),
                    );
                    out.resize(out.len() + value_size, b'x');
                    out.extend_from_slice(b"\r\n");
                }
            },
            Protocol::Line => out.extend_from_slice(format!("ping {seq}\n").as_bytes()),
        }
    }

    /// Parses the next complete response at the start of `buf`.
    /// Ok(None): incomplete, read more. Err: not this protocol (garbage).
    pub fn parse(&self, buf: &[u8]) -> Result<Option<Response>, String> {
        match self {
            Protocol::Http { .. } => parse_http(buf),
            Protocol::Redis(_) => {
                parse_resp(buf, 0).map(|r| r.map(|(len, ok)| Response { len, ok }))
            }
            Protocol::Memcache(op) => parse_memcache(buf, op),
            Protocol::Line => Ok(find(buf, b"\n").map(|i| Response {
                len: i + 1,
                ok: true,
            })),
        }
    }
}

/// A complete response: its length in bytes and whether it was a success
/// (an error reply is a counted error, not a dropped sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    pub len: usize,
    pub ok: bool,
}

fn find(buf: &[u8], needle: &[u8]) -> Option<usize> {
    buf.windows(needle.len()).position(|w| w == needle)
}

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    find(buf, b"\r\n").map(|i| (&buf[..i], i + 2))
}

fn parse_http(buf: &[u8]) -> Result<Option<Response>, String> {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > 64 * 1024 {
            return Err("HTTP header larger than 64 KiB".into());
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| "HTTP header is not UTF-8".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line:?}"))?;
    let mut content_length = None;
    let mut chunked = false;
    for h in lines {
        let Some((name, value)) = h.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.eq_ignore_ascii_case("chunked")
        {
            chunked = true;
        }
    }
    let body_start = head_end + 4;
    let ok = status < 400;
    if chunked {
        return Ok(chunked_end(&buf[body_start..])?.map(|n| Response {
            len: body_start + n,
            ok,
        }));
    }
    let body = content_length.unwrap_or(0);
    Ok((buf.len() >= body_start + body).then_some(Response {
        len: body_start + body,
        ok,
    }))
}

/// Length of a complete chunked body (through the final empty chunk).
fn chunked_end(body: &[u8]) -> Result<Option<usize>, String> {
    let mut at = 0;
    loop {
        let Some((size_line, n)) = line(&body[at..]) else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(size_line).map_err(|_| "bad chunk size".to_string())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        at += n;
        if size == 0 {
            // Trailers end with an empty line.
            loop {
                let Some((l, n)) = line(&body[at..]) else {
                    return Ok(None);
                };
                at += n;
                if l.is_empty() {
                    return Ok(Some(at));
                }
            }
        }
        if body.len() < at + size + 2 {
            return Ok(None);
        }
        at += size + 2;
    }
}

/// One RESP value: (length, not an error reply).
fn parse_resp(buf: &[u8], depth: u32) -> Result<Option<(usize, bool)>, String> {
    if depth > 8 {
        return Err("RESP nesting too deep".into());
    }
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some((head, n)) = line(buf) else {
        return Ok(None);
    };
    let number = || -> Result<i64, String> {
        std::str::from_utf8(&head[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad RESP length {:?}", String::from_utf8_lossy(head)))
    };
    match kind {
        b'+' | b':' => Ok(Some((n, true))),
        b'-' => Ok(Some((n, false))),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some((n, true)));
            }
            let total = n + len as usize + 2;
            Ok((buf.len() >= total).then_some((total, true)))
        }
        b'*' => {
            let count = number()?;
            let mut at = n;
            let mut ok = true;
            for _ in 0..count.max(0) {
                match parse_resp(&buf[at..], depth + 1)? {
                    Some((len, item_ok)) => {
                        at += len;
                        ok &= item_ok;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((at, ok)))
        }
        other => Err(format!(
            "not a RESP reply (starts with {:?})",
            other as char
        )),
    }
}

fn parse_memcache(buf: &[u8], op: &KvOp) -> Result<Option<Response>, String> {
    let Some((first, n)) = line(buf) else {
        return Ok(None);
    };
    let error = |l: &[u8]| {
        l.starts_with(b"ERROR") || l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"SERVER_ERROR")
    };
    if error(first) {
        return Ok(Some(Response { len: n, ok: false }));
    }
    match op {
        KvOp::Ping => {
            if first.starts_with(b"VERSION") {
                Ok(Some(Response { len: n, ok: true }))
            } else {
                Err(format!(
                    "unexpected memcache reply {:?}",
                    String::from_utf8_lossy(first)
                ))
            }
        }
        KvOp::Set { .. } => match first {
            b"STORED" => Ok(Some(Response { len: n, ok: true })),
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Ok(Some(Response { len: n, ok: false })),
            other => Err(format!(
                "unexpected memcache reply {:?}",
                String::from_utf8_lossy(other)
            )),
        },
        KvOp::Get { .. } => {
            let mut at = 0;
            loop {
                let Some((l, n)) = line(&buf[at..]) else {
                    return Ok(None);
                };
                if l == b"END" {
                    return Ok(Some(Response {
                        len: at + n,
                        ok: true,
                    }));
                }
                let Some(rest) = l.strip_prefix(b"VALUE ") else {
                    return Err(format!(
                        "unexpected memcache reply {:?}",
                        String::from_utf8_lossy(l)
                    ));
                };
                let bytes: usize = std::str::from_utf8(rest)
                    .ok()
                    .and_then(|r| r.split_whitespace().nth(2))
                    .and_then(|b| b.parse().ok())
                    .ok_or_else(|| format!("bad VALUE line {:?}", String::from_utf8_lossy(l)))?;
                at += n;
                if buf.len() < at + bytes + 2 {
                    return Ok(None);
                }
                at += bytes + 2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(p: &Protocol, b: &[u8]) -> Option<Response> {
        p.parse(b).expect("valid")
    }

    #[test]
    fn http_content_length_and_pipelining() {
        let p = Protocol::Http {
            host: "h".into(),
            path: "/".into(),
        };
        let one = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let mut two = one.to_vec();
        two.extend_from_slice(b"HTTP/1.1 503 X\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(
            resp(&p, &two),
            Some(Response {
                len: one.len(),
                ok: true
            })
        );
        assert_eq!(
            resp(&p, &two[one.len()..]),
            Some(Response {
                len: two.len() - one.len(),
                ok: false
            })
        );
        assert_eq!(resp(&p, &one[..one.len() - 1]), None);
    }

    #[test]
    fn http_chunked() {
        let p = Protocol::Http {
            host: "h".into(),
            path: "/".into(),
        };
        let b = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(
            resp(&p, b),
            Some(Response {
                len: b.len(),
                ok: true
            })
        );
        assert_eq!(resp(&p, &b[..b.len() - 2]), None);
    }

    #[test]
    fn garbage_is_an_error() {
        let p = Protocol::Http {
            host: "h".into(),
            path: "/".into(),
        };
        assert!(p.parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(Protocol::Redis(KvOp::Ping).parse(b"hello\r\n").is_err());
    }

    #[test]
    fn resp_values() {
        let p = Protocol::Redis(KvOp::Ping);
        assert_eq!(resp(&p, b"+PONG\r\n"), Some(Response { len: 7, ok: true }));
        assert_eq!(
            resp(&p, b"-ERR x\r\n"),
            Some(Response { len: 8, ok: false })
        );
        assert_eq!(
            resp(&p, b"$3\r\nabc\r\n+"),
            Some(Response { len: 9, ok: true })
        );
        assert_eq!(resp(&p, b"$-1\r\n"), Some(Response { len: 5, ok: true }));
        assert_eq!(resp(&p, b"$3\r\nab"), None);
        assert_eq!(
            resp(&p, b"*2\r\n:1\r\n$1\r\nx\r\n"),
            Some(Response { len: 15, ok: true })
        );
    }

    #[test]
    fn memcache_get_set() {
        let get = Protocol::Memcache(KvOp::Get { keys: 10 });
        assert_eq!(resp(&get, b"END\r\n"), Some(Response { len: 5, ok: true }));
        let hit = b"VALUE key:1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(
            resp(&get, hit),
            Some(Response {
                len: hit.len(),
                ok: true
            })
        );
        assert_eq!(resp(&get, &hit[..10]), None);
        let set = Protocol::Memcache(KvOp::Set {
            keys: 1,
            value_size: 3,
        });
        assert_eq!(
            resp(&set, b"STORED\r\n"),
            Some(Response { len: 8, ok: true })
        );
        assert_eq!(
            resp(&set, b"SERVER_ERROR oom\r\n"),
            Some(Response { len: 18, ok: false })
        );
    }

    #[test]
    fn encodes_requests() {
        let mut out = Vec::new();
        Protocol::Redis(KvOp::Set {
            keys: 4,
            value_size: 2,
        })
        .encode(5, &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$2\r\nxx\r\n");
        out.clear();
        Protocol::Memcache(KvOp::Get { keys: 4 }).encode(6, &mut out);
        assert_eq!(out, b"get key:2\r\n");
    }

    #[test]
    fn parses_urls() {
        let t = Target::parse("http://127.0.0.1:8080/x", &KvOp::Ping).expect("url");
        assert_eq!(t.addr, "127.0.0.1:8080");
        assert!(matches!(t.protocol, Protocol::Http { ref path, .. } if path == "/x"));
        assert!(Target::parse("ftp://a:1", &KvOp::Ping).is_err());
        assert!(Target::parse("redis://localhost", &KvOp::Ping).is_err());
    }
}
