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

impl Protocol {
    /// The response the server ended by closing the connection: an HTTP
    /// body without length or chunking runs to the close. None: the bytes
    /// left are not a complete response (a truncated one is an error).
    pub fn parse_at_eof(&self, buf: &[u8]) -> Option<Response> {
        match self {
            Protocol::Http { .. } => match http_head(buf) {
                Ok(Some((_, status, Body::UntilClose))) => Some(Response {
                    len: buf.len(),
                    ok: status < 400,
                }),
                _ => None,
            },
            _ => None,
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

/// How an HTTP response's body ends (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// 1xx, 204, 304: no body, whatever the headers say.
    None,
    Length(usize),
    Chunked,
    /// Neither length nor chunked: the body runs until the server closes.
    UntilClose,
}

/// Parses an HTTP response head with httparse: (head length, status, body
/// framing); Ok(None) while the head is incomplete.
fn http_head(buf: &[u8]) -> Result<Option<(usize, u16, Body)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > 64 * 1024 => {
            return Err("HTTP header larger than 64 KiB".into());
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP response: {e}")),
    };
    let status = r.code.unwrap_or(0);
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Some((head_len, status, Body::None)));
    }
    let header = |name: &'static str| {
        r.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    // Transfer-Encoding wins over Content-Length (§6.3, rule 3).
    if header("transfer-encoding").any(|v| v.to_ascii_lowercase().ends_with("chunked")) {
        return Ok(Some((head_len, status, Body::Chunked)));
    }
    let lengths: Vec<String> = header("content-length").collect();
    match lengths.first() {
        Some(first) if lengths.iter().all(|l| l == first) => {
            let n = first
                .parse::<usize>()
                .map_err(|_| format!("bad Content-Length {first:?}"))?;
            Ok(Some((head_len, status, Body::Length(n))))
        }
        Some(_) => Err("conflicting Content-Length headers".into()),
        None => Ok(Some((head_len, status, Body::UntilClose))),
    }
}

fn parse_http(buf: &[u8]) -> Result<Option<Response>, String> {
    let Some((head_len, status, body)) = http_head(buf)? else {
        return Ok(None);
    };
    // An interim response (100 Continue, 103 Early Hints) is not the
    // answer: the final response follows it.
    if (100..200).contains(&status) && status != 101 {
        return Ok(parse_http(&buf[head_len..])?.map(|r| Response {
            len: head_len + r.len,
            ok: r.ok,
        }));
    }
    let ok = status < 400;
    let len = match body {
        Body::None => Some(head_len),
        Body::Length(n) => (buf.len() >= head_len + n).then_some(head_len + n),
        Body::Chunked => chunked_end(&buf[head_len..])?.map(|n| head_len + n),
        // Complete only when the connection closes: see `parse_at_eof`.
        Body::UntilClose => None,
    };
    Ok(len.map(|len| Response { len, ok }))
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

    fn http() -> Protocol {
        Protocol::Http {
            host: "h".into(),
            path: "/".into(),
        }
    }

    /// 1xx, 204 and 304 have no body even with a Content-Length (RFC 9112
    /// §6.3): waiting for one would hang the connection until timeout.
    #[test]
    fn http_no_body_statuses() {
        let p = http();
        for head in [
            &b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 512\r\n\r\n",
        ] {
            assert_eq!(
                resp(&p, head),
                Some(Response {
                    len: head.len(),
                    ok: true
                })
            );
        }
        // An interim 100 Continue is not the answer; the 200 after it is.
        let both = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(
            resp(&p, both),
            Some(Response {
                len: both.len(),
                ok: true
            })
        );
        assert_eq!(resp(&p, &both[..30]), None);
    }

    /// No length and no chunking: the body runs to the close. Incomplete
    /// until then; complete with every byte once the server closes.
    #[test]
    fn http_close_delimited() {
        let p = http();
        let b = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello world";
        assert_eq!(resp(&p, b), None);
        assert_eq!(
            p.parse_at_eof(b),
            Some(Response {
                len: b.len(),
                ok: true
            })
        );
        // A truncated length-delimited body at the close is not a response.
        assert_eq!(
            p.parse_at_eof(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhel"),
            None
        );
        assert!(
            p.parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .is_err()
        );
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

    /// A stream of responses split at every read boundary gives the same
    /// responses as read whole, and no input makes a parser panic.
    mod split {
        use super::*;
        use proptest::prelude::*;

        fn protocols() -> Vec<Protocol> {
            vec![
                http(),
                Protocol::Redis(KvOp::Get { keys: 10 }),
                Protocol::Memcache(KvOp::Get { keys: 10 }),
                Protocol::Memcache(KvOp::Set {
                    keys: 10,
                    value_size: 4,
                }),
                Protocol::Line,
            ]
        }

        /// Responses as a reader sees them: parse what is buffered, keep
        /// the rest, read the next piece.
        fn read_in_pieces(
            p: &Protocol,
            stream: &[u8],
            cuts: &[usize],
        ) -> Result<Vec<Response>, String> {
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.push(stream.len());
            cuts.sort_unstable();
            let (mut buf, mut out, mut at) = (Vec::new(), Vec::new(), 0);
            for cut in cuts {
                buf.extend_from_slice(&stream[at..cut]);
                at = cut;
                while let Some(r) = p.parse(&buf)? {
                    out.push(r);
                    buf.drain(..r.len);
                }
            }
            Ok(out)
        }

        fn valid_responses() -> impl Strategy<Value = Vec<u8>> {
            let one = prop_oneof![
                Just(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec()),
                Just(b"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n".to_vec()),
                Just(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                        .to_vec()
                ),
                Just(
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 X\r\ncontent-length: 1\r\n\r\nz"
                        .to_vec()
                ),
            ];
            proptest::collection::vec(one, 1..6).prop_map(|v| v.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            #[test]
            fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                for p in protocols() {
                    let _ = p.parse(&bytes);
                    let _ = p.parse_at_eof(&bytes);
                }
            }

            #[test]
            fn http_split_reads_match_whole(stream in valid_responses(),
                                            cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
                let p = http();
                let whole = read_in_pieces(&p, &stream, &[]).expect("valid");
                prop_assert_eq!(whole.iter().map(|r| r.len).sum::<usize>(), stream.len());
                prop_assert_eq!(read_in_pieces(&p, &stream, &cuts).expect("valid"), whole);
            }

            #[test]
            fn any_split_of_any_bytes_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..200),
                                             cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
                for p in protocols() {
                    // Garbage may be refused, but the same way however it is
                    // split: a reader that errs drops the connection there.
                    let whole = read_in_pieces(&p, &bytes, &[]);
                    let split = read_in_pieces(&p, &bytes, &cuts);
                    match (whole, split) {
                        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                        (Err(_), Err(_)) => {}
                        (a, b) => prop_assert!(false, "{:?}: whole {:?}, split {:?}", p, a, b),
                    }
                }
            }
        }
    }
}
