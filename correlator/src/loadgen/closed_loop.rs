//! The closed-loop generator (`--closed-loop`), for comparison: one
//! request at a time per connection, latency from the actual send, as most
//! tools measure (coordinated omission included).

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    sync::{Arc, atomic::Ordering},
};

use anyhow::{Context as _, Result};

use super::protocol::Protocol;
use super::{
    Conn, Progress, SLOW_NS, Shared, connect, generator_thread, lock, open_connections,
    open_loop::watch, sleep_until,
};
use crate::{clock, latency::recorder::RequestTimes};

/// Closed loop: one request at a time per connection. Each connection
/// takes every C-th slot of the schedule but waits for the previous
/// response before sending, and the primary latency is from the actual
/// send: what most load tools measure, and how they hide stalls.
pub(super) fn run_closed_loop(
    shared: &Arc<Shared>,
    windows: &[(u64, u64)],
    progress: Option<Progress>,
) -> Result<()> {
    let conns = open_connections(shared)?;
    let workers: Vec<_> = conns
        .iter()
        .map(|c| {
            let (shared, conn, windows) = (Arc::clone(shared), Arc::clone(c), windows.to_vec());
            std::thread::Builder::new()
                .name(format!("load-closed-{}", c.id))
                .spawn(move || closed_loop_worker(&shared, &conn, &windows))
        })
        .collect::<std::io::Result<_>>()
        .context("cannot start load threads")?;
    watch(shared, windows, progress);
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}

fn closed_loop_worker(shared: &Shared, conn: &Conn, windows: &[(u64, u64)]) {
    generator_thread(&shared.opts);
    let opts = &shared.opts;
    let timeout = u64::try_from(opts.timeout.as_nanos()).unwrap_or(u64::MAX);
    let warmup = u64::try_from(opts.warmup.as_nanos()).unwrap_or(0);
    let c = opts.connections as u64;
    let mut stream = lock(&conn.writer).take();
    let mut request = Vec::with_capacity(256);
    let mut buf = vec![0u8; 64 * 1024];
    for (phase, (&rate, &(start, end))) in opts.rates.iter().zip(windows).enumerate() {
        let interval = 1e9 / rate;
        for j in 0u64.. {
            let seq = j * c + u64::from(conn.id);
            let intended = start + (seq as f64 * interval) as u64;
            if intended >= end || opts.cancel.load(Ordering::Relaxed) {
                break;
            }
            sleep_until(intended);
            let sent = clock::monotonic_ns();
            let measured = intended >= start + warmup;
            lock(&shared.recorder).sent(
                phase as u32,
                sent,
                sent.saturating_sub(intended),
                measured,
            );
            if stream.is_none() {
                stream = connect(shared.addr, opts.timeout).ok();
            }
            let Some(s) = stream.as_mut() else {
                lock(&shared.recorder).failed(phase as u32);
                continue;
            };
            request.clear();
            opts.target.protocol.encode(seq, &mut request);
            let mut times = RequestTimes {
                intended_ns: intended,
                sent_ns: sent,
                done_ns: 0,
                connection: conn.id,
                phase: phase as u32,
            };
            match exchange(s, &opts.target.protocol, &request, &mut buf, sent, timeout) {
                Exchange::Answered { ok, done, closed } => {
                    if closed {
                        stream = None;
                    }
                    times.done_ns = done;
                    if times.service() >= SLOW_NS {
                        shared.slow.fetch_add(1, Ordering::Relaxed);
                    }
                    lock(&shared.recorder).answered(times, measured, ok);
                    shared.completed.fetch_add(1, Ordering::Relaxed);
                }
                Exchange::TimedOut => {
                    times.done_ns = clock::monotonic_ns().max(sent + timeout);
                    lock(&shared.recorder).timed_out(times, measured);
                    stream = None;
                }
                Exchange::Failed => {
                    lock(&shared.recorder).failed(phase as u32);
                    stream = None;
                }
            }
        }
    }
}

fn exchange(
    s: &mut TcpStream,
    protocol: &Protocol,
    request: &[u8],
    buf: &mut Vec<u8>,
    sent: u64,
    timeout: u64,
) -> Exchange {
    if s.write_all(request).is_err() {
        return Exchange::Failed;
    }
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match s.read(&mut buf[len..]) {
            Ok(0) => {
                return match protocol.parse_at_eof(&buf[..len]) {
                    Some(r) => Exchange::Answered {
                        ok: r.ok,
                        done: clock::monotonic_ns(),
                        closed: true,
                    },
                    None => Exchange::Failed,
                };
            }
            Ok(n) => {
                len += n;
                let done = clock::monotonic_ns();
                match protocol.parse(&buf[..len]) {
                    Ok(Some(r)) => {
                        return Exchange::Answered {
                            ok: r.ok,
                            done,
                            closed: false,
                        };
                    }
                    Ok(None) => {}
                    Err(_) => return Exchange::Failed,
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if clock::monotonic_ns().saturating_sub(sent) > timeout {
                    return Exchange::TimedOut;
                }
            }
            Err(_) => return Exchange::Failed,
        }
    }
}

/// How one closed-loop request ended.
enum Exchange {
    /// `closed`: the server closed the connection to end the response.
    Answered {
        ok: bool,
        done: u64,
        closed: bool,
    },
    TimedOut,
    Failed,
}
