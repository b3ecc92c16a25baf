//! The open-loop generator: a pacer sends every request at its intended
//! time on one of the connections (pipelining when the server stalls), and
//! a reader thread per connection timestamps each response as it arrives.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use anyhow::{Context as _, Result};

use super::protocol::{Protocol, Response};
use super::{
    Conn, InFlight, Progress, SLOW_NS, Shared, connect, generator_thread, lock, make_realtime,
    open_connections, sleep_until,
};
use crate::{
    clock,
    latency::recorder::{Recorder, RequestTimes},
};

pub(super) fn run_open_loop(
    shared: &Arc<Shared>,
    windows: &[(u64, u64)],
    progress: Option<Progress>,
) -> Result<()> {
    let conns = open_connections(shared)?;
    let readers: Vec<_> = conns
        .iter()
        .map(|c| {
            let (shared, conn) = (Arc::clone(shared), Arc::clone(c));
            std::thread::Builder::new()
                .name(format!("load-read-{}", c.id))
                .spawn(move || reader(&shared, &conn))
        })
        .collect::<std::io::Result<_>>()
        .context("cannot start reader threads")?;
    let pacer = {
        let (shared, conns, windows) = (Arc::clone(shared), conns.clone(), windows.to_vec());
        std::thread::Builder::new()
            .name("load-pacer".into())
            .spawn(move || pacer(&shared, &conns, &windows))
            .context("cannot start the pacer")?
    };
    watch(shared, windows, progress);
    let _ = pacer.join();
    // Let in-flight requests finish or time out, then stop the readers.
    let deadline = clock::monotonic_ns()
        + u64::try_from(shared.opts.timeout.as_nanos()).unwrap_or(0)
        + 20_000_000;
    while clock::monotonic_ns() < deadline && conns.iter().any(|c| !lock(&c.inflight).is_empty()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    shared.stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    Ok(())
}

/// Reports progress until the last phase ends.
pub(super) fn watch(shared: &Shared, windows: &[(u64, u64)], progress: Option<Progress>) {
    let (start, end) = (windows[0].0, windows[windows.len() - 1].1);
    while clock::monotonic_ns() < end && !shared.opts.cancel.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        if let Some(report) = progress {
            report(
                clock::monotonic_ns().saturating_sub(start),
                shared.completed.load(Ordering::Relaxed),
                shared.slow.load(Ordering::Relaxed),
            );
        }
    }
}

/// Sends every request at its intended time, round-robin over connections.
/// Send counts and slips are kept locally and merged at the end, so the
/// pacer never waits for the recorder lock the readers use.
pub(super) fn pacer(shared: &Shared, conns: &[Arc<Conn>], windows: &[(u64, u64)]) {
    generator_thread(&shared.opts);
    if shared.opts.rt_pacer && !make_realtime() {
        log::warn!(
            "--rt-pacer: cannot make the pacer SCHED_FIFO (needs root or CAP_SYS_NICE); running it at normal priority"
        );
        shared.rt_refused.store(true, Ordering::Relaxed);
    }
    let mut local = Recorder::new(shared.opts.rates.len(), windows[0].0);
    let warmup = u64::try_from(shared.opts.warmup.as_nanos()).unwrap_or(0);
    let mut buf = Vec::with_capacity(256);
    let mut seq = 0u64;
    for (phase, (&rate, &(start, end))) in shared.opts.rates.iter().zip(windows).enumerate() {
        let interval = 1e9 / rate;
        for i in 0u64.. {
            let intended = start + (i as f64 * interval) as u64;
            if intended >= end || shared.opts.cancel.load(Ordering::Relaxed) {
                break;
            }
            sleep_until(intended);
            let conn = &conns[(seq % conns.len() as u64) as usize];
            buf.clear();
            shared.opts.target.protocol.encode(seq, &mut buf);
            send(
                &mut local,
                conn,
                &buf,
                intended,
                phase as u32,
                intended >= start + warmup,
            );
            seq += 1;
        }
    }
    lock(&shared.recorder).merge_sends(&local);
}

pub(super) fn send(
    local: &mut Recorder,
    conn: &Conn,
    request: &[u8],
    intended: u64,
    phase: u32,
    measured: bool,
) {
    let mut writer = lock(&conn.writer);
    let sent = clock::monotonic_ns();
    local.sent(phase, sent, sent.saturating_sub(intended), measured);
    let Some(stream) = writer.as_mut() else {
        local.failed(phase);
        return;
    };
    let times = RequestTimes {
        intended_ns: intended,
        sent_ns: sent,
        done_ns: 0,
        connection: conn.id,
        phase,
    };
    // Queue before writing: the response cannot overtake its entry.
    lock(&conn.inflight).push_back(InFlight { times, measured });
    if stream.write_all(request).is_err() {
        // Unqueue it (only the pacer pushes, so it is the last entry) and
        // let the reader see the broken connection and reconnect.
        lock(&conn.inflight).pop_back();
        local.failed(phase);
        let _ = stream.shutdown(std::net::Shutdown::Both);
        *writer = None;
    }
}

/// Reads responses of one connection, matches them to requests in order,
/// times out stuck requests, and reconnects after failures.
pub(super) fn reader(shared: &Shared, conn: &Conn) {
    generator_thread(&shared.opts);
    let timeout = u64::try_from(shared.opts.timeout.as_nanos()).unwrap_or(u64::MAX);
    let protocol = &shared.opts.target.protocol;
    let mut stream = lock(&conn.writer).as_ref().and_then(|s| s.try_clone().ok());
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(s) = stream.as_mut() else {
            std::thread::sleep(Duration::from_millis(50));
            stream = reconnect(shared, conn);
            len = 0;
            continue;
        };
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let broken = match s.read(&mut buf[len..]) {
            Ok(0) => {
                // A response delimited by the close (HTTP without length)
                // is complete now; the connection is gone either way.
                if let Some(resp) = protocol.parse_at_eof(&buf[..len]) {
                    answer(shared, conn, resp, clock::monotonic_ns());
                }
                true
            }
            Ok(n) => {
                len += n;
                let done = clock::monotonic_ns();
                match consume(shared, conn, protocol, &buf[..len], done) {
                    Ok(used) => {
                        buf.copy_within(used..len, 0);
                        len -= used;
                        false
                    }
                    Err(()) => true,
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                expire(shared, conn, timeout)
            }
            Err(_) => true,
        };
        if broken {
            fail_inflight(shared, conn);
            if let Some(s) = stream.take() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            *lock(&conn.writer) = None;
        }
    }
}

/// Parses complete responses from `buf`; returns the bytes used, or Err if
/// the connection must be dropped (garbage or an unrequested response).
pub(super) fn consume(
    shared: &Shared,
    conn: &Conn,
    protocol: &Protocol,
    buf: &[u8],
    done: u64,
) -> Result<usize, ()> {
    let mut used = 0;
    loop {
        match protocol.parse(&buf[used..]) {
            Ok(Some(resp)) => {
                if !answer(shared, conn, resp, done) {
                    return Err(());
                }
                used += resp.len;
            }
            Ok(None) => return Ok(used),
            Err(reason) => {
                log::warn!(
                    "{}: unparseable response ({reason}); reconnecting",
                    shared.opts.url
                );
                return Err(());
            }
        }
    }
}

/// Records `resp` as the answer to the oldest request in flight; false
/// when nothing was in flight (the stream is out of step).
fn answer(shared: &Shared, conn: &Conn, resp: Response, done: u64) -> bool {
    let Some(mut req) = lock(&conn.inflight).pop_front() else {
        lock(&shared.recorder).failed(0);
        return false;
    };
    req.times.done_ns = done;
    if req.times.corrected() >= SLOW_NS {
        shared.slow.fetch_add(1, Ordering::Relaxed);
    }
    lock(&shared.recorder).answered(req.times, req.measured, resp.ok);
    shared.completed.fetch_add(1, Ordering::Relaxed);
    true
}

/// Times out the oldest request if it waited longer than the timeout;
/// returns true when the connection must be dropped (its stream is then
/// out of step: later responses cannot be matched).
pub(super) fn expire(shared: &Shared, conn: &Conn, timeout: u64) -> bool {
    let now = clock::monotonic_ns();
    let stuck = lock(&conn.inflight)
        .front()
        .is_some_and(|r| now.saturating_sub(r.times.sent_ns) > timeout);
    if !stuck {
        return false;
    }
    let drained: Vec<InFlight> = lock(&conn.inflight).drain(..).collect();
    let mut rec = lock(&shared.recorder);
    for mut r in drained {
        r.times.done_ns = now.max(r.times.sent_ns + timeout);
        rec.timed_out(r.times, r.measured);
    }
    true
}

/// Everything still queued on a broken connection is an error.
pub(super) fn fail_inflight(shared: &Shared, conn: &Conn) {
    let drained: Vec<InFlight> = lock(&conn.inflight).drain(..).collect();
    let mut rec = lock(&shared.recorder);
    for r in drained {
        rec.failed(r.times.phase);
    }
}

pub(super) fn reconnect(shared: &Shared, conn: &Conn) -> Option<TcpStream> {
    let fresh = connect(shared.addr, shared.opts.timeout).ok()?;
    let reader = fresh.try_clone().ok()?;
    *lock(&conn.writer) = Some(fresh);
    Some(reader)
}
