//! Passive request latency: socket reads paired with the writes that
//! answer them (`--syscalls`, from `sys_exit`, or from the socket
//! tracepoints when the syscall hooks are off), and timed calls of one
//! function (`--uprobe`).

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_RB_NO_WAKEUP,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{btf_tracepoint, cgroup_sock_addr, uprobe, uretprobe},
    programs::{BtfTracePointContext, ProbeContext, RetProbeContext, SockAddrContext},
};
use correlator_common::{
    CallState, ConnState, RequestRecord, SOCKET_CONN, Total, UPROBE_FD, UpstreamRecord,
    UpstreamState,
};

use crate::{
    helpers::{arg, is_target_tgid, now, total_add},
    maps::{
        CALLS, CONNS, LISTEN_PORTS, REQUESTS, SOCKETS_SEEN, SOCKETS_SEEN_SLOTS, UPSTREAM_CONNS,
        UPSTREAMS,
    },
};

/// x86-64 syscall numbers of the calls that move a request's bytes.
pub(crate) const SYS_READ: u64 = 0;
pub(crate) const SYS_WRITE: u64 = 1;
pub(crate) const SYS_READV: u64 = 19;
pub(crate) const SYS_WRITEV: u64 = 20;
pub(crate) const SYS_SENDTO: u64 = 44;
pub(crate) const SYS_RECVFROM: u64 = 45;
pub(crate) const SYS_SENDMSG: u64 = 46;
pub(crate) const SYS_RECVMSG: u64 = 47;

#[inline(always)]
pub(crate) fn emit_request(rec: RequestRecord) {
    match REQUESTS.reserve::<RequestRecord>(0) {
        Some(mut entry) => {
            entry.write(rec);
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => total_add(Total::RequestsLost),
    }
}

/// `--syscalls` at `sys_exit` (exact syscall time): a socket read or
/// write of a target thread, found by the syscall number and descriptor in
/// the saved user registers.
#[inline(always)]
pub(crate) fn pair_request(ctx: &BtfTracePointContext, pid_tgid: u64) {
    let tgid = (pid_tgid >> 32) as u32;
    if !is_target_tgid(tgid) {
        return;
    }
    let ret: i64 = arg(ctx, 1);
    if ret <= 0 {
        return;
    }
    let regs: *const u8 = arg(ctx, 0);
    // SAFETY: the helper checks the address.
    let read_reg = |offset: u64| unsafe {
        bpf_probe_read_kernel(regs.add(offset as usize).cast::<u64>()).unwrap_or(u64::MAX)
    };
    let nr = read_reg(config!(regs_nr_offset));
    let reading = match nr {
        SYS_READ | SYS_READV | SYS_RECVFROM | SYS_RECVMSG => true,
        SYS_WRITE | SYS_WRITEV | SYS_SENDTO | SYS_SENDMSG => false,
        _ => return,
    };
    let fd = read_reg(config!(regs_arg0_offset)) as u32;
    let key = (u64::from(tgid) << 32) | u64::from(fd);
    transfer(pid_tgid, key, None, || fd, reading, ret as u64);
}

/// `MSG_PEEK`: a read that leaves the data queued.
const MSG_PEEK: u64 = 2;

/// `--syscalls` without the syscall hooks (`--syscall-time sampled`): a
/// socket's receive, at the socket layer's own tracepoint, which costs
/// nothing to tasks that do not call it (a syscall tracepoint sends every
/// syscall of every task through the kernel's slow entry path).
/// sock_recv_length(struct sock *sk, int ret, int flags)
#[btf_tracepoint(function = "sock_recv_length")]
pub fn sock_recv_length(ctx: BtfTracePointContext) -> i32 {
    socket_transfer(&ctx, true);
    0
}

/// The send side of `sock_recv_length`.
/// sock_send_length(struct sock *sk, int ret, int flags)
#[btf_tracepoint(function = "sock_send_length")]
pub fn sock_send_length(ctx: BtfTracePointContext) -> i32 {
    socket_transfer(&ctx, false);
    0
}

#[inline(always)]
fn socket_transfer(ctx: &BtfTracePointContext, reading: bool) {
    if config!(floor_only) != 0 {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_target_tgid((pid_tgid >> 32) as u32) {
        return;
    }
    // An `int` argument: the low 32 bits of its slot.
    let ret = arg::<u64>(ctx, 1) as u32 as i32;
    let flags: u64 = arg(ctx, 2);
    if ret <= 0 || (reading && flags & MSG_PEEK != 0) {
        return;
    }
    // The socket's address keys its connection (kernel addresses never
    // collide with the (tgid, fd) keys of the syscall hooks): a direct
    // context load, used only as the key (the verifier tracks it as a
    // pointer and allows no arithmetic on it).
    let sk: u64 = arg(ctx, 0);
    let sock: *const u8 = arg(ctx, 0);
    if config!(upstreams) != 0 && is_upstream(sock) {
        upstream_transfer(sk, sock, ctx, pid_tgid, reading, ret as u64);
        // Not a request to the server: never paired as one.
        return;
    }
    if config!(pair_at_sockets) == 0 {
        return;
    }
    // Its bits above the slab's 64-byte alignment number the connection
    // for userspace: only for a record.
    let label = || conn_label(sk_address(ctx));
    transfer(
        pid_tgid,
        sk,
        Some(seen_slot(sock)),
        label,
        reading,
        ret as u64,
    );
}

/// The socket in slot 0 of a socket tracepoint's context, as a number,
/// read by the helper: for its fields and to label its connection in
/// records (a direct load of the slot is a pointer the verifier allows
/// no arithmetic on).
#[inline(always)]
fn sk_address(ctx: &BtfTracePointContext) -> u64 {
    // SAFETY: the helper checks the address; slot 0 of the context.
    unsafe { bpf_probe_read_kernel(ctx.as_ptr().cast::<u64>()) }.unwrap_or(0)
}

/// A connection's number in records: the socket address's bits above the
/// slab's 64-byte alignment, with the `SOCKET_CONN` bit.
#[inline(always)]
fn conn_label(sk: u64) -> u32 {
    SOCKET_CONN | ((sk >> 6) as u32 & 0x3fff_ffff)
}

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// A field of the socket at `sk` (a kernel address read as a number).
#[inline(always)]
fn sk_field<T: Default>(sk: u64, offset: u64) -> T {
    // SAFETY: the helper checks the address.
    unsafe { bpf_probe_read_kernel((sk + offset) as *const T) }.unwrap_or_default()
}

/// A field of the socket a socket tracepoint was given, by a direct load
/// through its BTF-typed pointer (the offsets are frozen load-time
/// constants the verifier checks against `struct sock`): these run for
/// every socket transfer of the target, where a `bpf_probe_read_kernel`
/// per field was a helper call each (three to classify a socket, costly
/// with this kernel's return thunks).
#[inline(always)]
fn sock_field<T: Copy>(sock: *const u8, offset: u64) -> T {
    // SAFETY: `sock` is the tracepoint's `struct sock *`; the verifier
    // checks the access.
    unsafe { core::ptr::read_unaligned(sock.add(offset as usize).cast::<T>()) }
}

/// An IPv4 or IPv6 socket with a peer whose local port the target does
/// not listen on: a connection the target opened (an upstream), not one
/// it accepted.
#[inline(always)]
fn is_upstream(sock: *const u8) -> bool {
    let family: u16 = sock_field(sock, config!(skc_family_offset));
    if family != AF_INET && family != AF_INET6 {
        return false;
    }
    let local: u16 = sock_field(sock, config!(skc_num_offset));
    if LISTEN_PORTS.get(u32::from(local)).is_some_and(|&l| l != 0) {
        return false;
    }
    sock_field::<u16>(sock, config!(skc_dport_offset)) != 0
}

/// A send on an upstream connection starts an exchange (unless one is in
/// flight: a request in several writes); the next read that returns data
/// ends it with a record.
#[inline(always)]
fn upstream_transfer(
    key: u64,
    sock: *const u8,
    ctx: &BtfTracePointContext,
    pid_tgid: u64,
    reading: bool,
    bytes: u64,
) {
    let ts = now();
    let tid = pid_tgid as u32;
    let Some(u) = UPSTREAM_CONNS.get_ptr_mut(&key) else {
        if !reading {
            let fresh = UpstreamState {
                sent_ns: ts,
                arrived_ns: 0,
                tid,
                bytes_out: bytes.min(u64::from(u32::MAX)) as u32,
            };
            mark_seen(seen_slot(sock), SEEN_UPSTREAM);
            if UPSTREAM_CONNS.insert(&key, &fresh, 0).is_err() {
                total_add(Total::UpstreamsLost);
            }
        }
        return;
    };
    // SAFETY: map value; the target's threads and `sk_data_ready` write it
    // (a race loses at most one arrival time).
    unsafe {
        if !reading {
            if (*u).sent_ns == 0 {
                (*u).sent_ns = ts;
                (*u).arrived_ns = 0;
                (*u).tid = tid;
                (*u).bytes_out = 0;
            }
            (*u).bytes_out = (*u)
                .bytes_out
                .saturating_add(bytes.min(u64::from(u32::MAX)) as u32);
            return;
        }
        let sent = (*u).sent_ns;
        if sent == 0 {
            return;
        }
        (*u).sent_ns = 0;
        let Some(mut entry) = UPSTREAMS.reserve::<UpstreamRecord>(0) else {
            total_add(Total::UpstreamsLost);
            return;
        };
        let family: u16 = sock_field(sock, config!(skc_family_offset));
        let mut addr = [0u8; 16];
        if family == AF_INET {
            let v4: [u8; 4] = sock_field(sock, config!(skc_daddr_offset));
            addr[..4].copy_from_slice(&v4);
        } else {
            addr = sock_field(sock, config!(skc_v6_daddr_offset));
        }
        let port = u16::from_be(sock_field(sock, config!(skc_dport_offset)));
        let arrived = (*u).arrived_ns;
        entry.write(UpstreamRecord {
            tgid: (pid_tgid >> 32) as u32,
            tid: (*u).tid,
            reader_tid: tid,
            family,
            port,
            addr,
            conn: conn_label(sk_address(ctx)),
            bytes_out: (*u).bytes_out,
            sent_ns: sent,
            arrived_ns: if arrived >= sent && arrived <= ts {
                arrived
            } else {
                0
            },
            read_ns: ts,
        });
        entry.submit(BPF_RB_NO_WAKEUP as u64);
    }
}

/// Data arrived in a socket: if the target reads that socket (it has a
/// connection entry) and has not read since, the arrival starts its next
/// request. This is the wait in the socket a stall imposes on every request
/// queued behind it, invisible from the reads alone. It runs where the data
/// is queued (the sender's softirq, for loopback), so it cannot filter on
/// the current task: the connection map is the filter. A connection's first
/// request has no entry yet and starts at its read.
/// sk_data_ready(const struct sock *sk)
#[btf_tracepoint(function = "sk_data_ready")]
pub fn sk_data_ready(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    // A direct context load (no helper call: this runs for every arrival on
    // the machine), used only as the map key, never as a number.
    let sk: u64 = arg(&ctx, 0);
    let sock: *const u8 = arg(&ctx, 0);
    let seen = seen_bits(seen_slot(sock));
    if seen == 0 {
        return 0;
    }
    if config!(upstreams) != 0
        && seen & SEEN_UPSTREAM != 0
        && let Some(u) = UPSTREAM_CONNS.get_ptr_mut(&sk)
    {
        // SAFETY: map value (see `upstream_transfer`).
        unsafe {
            if (*u).sent_ns != 0 && (*u).arrived_ns == 0 {
                (*u).arrived_ns = now();
            }
        }
        return 0;
    }
    if config!(requests_from_arrival) == 0 || seen & SEEN_CONN == 0 {
        return 0;
    }
    if let Some(c) = CONNS.get_ptr_mut(&sk) {
        // SAFETY: map value; a race with the target's read loses at most
        // this arrival (the request then starts at its read).
        unsafe {
            let ts = now();
            if (*c).arrived_ns == 0 {
                (*c).arrived_ns = ts;
            }
            (*c).last_arrived_ns = ts;
        }
    }
    0
}

/// Bits of a `SOCKETS_SEEN` slot.
const SEEN_CONN: u32 = 1;
const SEEN_UPSTREAM: u32 = 2;

/// The `SOCKETS_SEEN` slot of a socket: a hash of its local and remote
/// ports, two direct loads (the socket's address is a pointer to the
/// verifier, which allows no arithmetic on it, and reading it as a number
/// is a helper call). Sockets without ports (Unix) share one slot, which
/// then filters nothing for them.
#[inline(always)]
fn seen_slot(sock: *const u8) -> u32 {
    let local = u32::from(sock_field::<u16>(sock, config!(skc_num_offset)));
    let remote = u32::from(sock_field::<u16>(sock, config!(skc_dport_offset)));
    ((local << 16) | remote).wrapping_mul(0x9E37_79B1) >> 18 & (SOCKETS_SEEN_SLOTS - 1)
}

/// The `SEEN_*` bits of `slot`.
#[inline(always)]
fn seen_bits(slot: u32) -> u32 {
    SOCKETS_SEEN.get(slot).copied().unwrap_or(0)
}

/// Notes that the socket of `SOCKETS_SEEN` slot `slot` is about to get an
/// entry in `CONNS` or `UPSTREAM_CONNS` (`bit`).
#[inline(always)]
fn mark_seen(slot: u32, bit: u32) {
    if let Some(slot) = SOCKETS_SEEN.get_ptr_mut(slot) {
        // SAFETY: array map value; a racing writer can only lose a bit
        // another socket set, which costs that socket its arrival time
        // until its next entry (as a connection's first request has).
        unsafe { *slot |= bit };
    }
}

/// TCP states (include/net/tcp_states.h).
const TCP_ESTABLISHED: i32 = 1;
const TCP_SYN_SENT: i32 = 2;
const TCP_SYN_RECV: i32 = 3;
const TCP_CLOSE: i32 = 7;
const TCP_LISTEN: i32 = 10;

/// A TCP socket begins or ends a connection: its connection entry goes.
/// Sockets are slab objects, so a closed socket's address soon belongs to
/// another (the next accepted connection, or a client's socket): without
/// this, that socket's arrivals, or the first read of the next connection,
/// would continue the old entry (a 4 s "request" was seen on redis-server
/// after a few short redis-cli connections). Unix sockets have no such
/// hook: their entries are only ever replaced.
/// inet_sock_set_state(const struct sock *sk, int oldstate, int newstate)
#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn inet_sock_set_state(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    // An `int` argument: the low 32 bits of its slot.
    let state = arg::<u64>(&ctx, 2) as u32 as i32;
    let sk: u64 = arg(&ctx, 0);
    if state == TCP_SYN_SENT {
        // The target connects out: an upstream, whose transfers userspace
        // then starts hooking (held back while it has none, as every
        // socket transfer on the machine pays for the hooks).
        if config!(upstreams) != 0 && is_target_tgid((bpf_get_current_pid_tgid() >> 32) as u32) {
            total_add(Total::UpstreamConnects);
        }
        return 0;
    }
    if matches!(state, TCP_ESTABLISHED | TCP_SYN_RECV | TCP_CLOSE) {
        let _ = CONNS.remove(&sk);
        if config!(upstreams) != 0 {
            let _ = UPSTREAM_CONNS.remove(&sk);
        }
    } else if state == TCP_LISTEN
        && config!(upstreams) != 0
        && is_target_tgid((bpf_get_current_pid_tgid() >> 32) as u32)
    {
        // The target starts listening (in its listen() call): connections
        // accepted on this port are its inbound ones.
        let port: u16 = sk_field(sk_address(&ctx), config!(skc_num_offset));
        if let Some(slot) = LISTEN_PORTS.get_ptr_mut(u32::from(port)) {
            // SAFETY: array map value.
            unsafe { *slot = 1 };
        }
    }
    0
}

/// `SOCK_DGRAM` (include/linux/net.h).
const SOCK_DGRAM: u32 = 2;

/// A `connect()` in the target's cgroup on an IPv4 socket: a UDP socket
/// of the target's connected to a peer is an upstream (a resolver, a
/// metrics sink, a UDP backend), and UDP's connect fires no
/// `inet_sock_set_state`. Attached only while the transfer hooks wait for
/// an upstream, to the target's cgroup: it runs at connects, never at
/// transfers. Returns 1 (the connect proceeds) whatever it finds.
#[cgroup_sock_addr(connect4)]
pub fn udp_connect4(ctx: SockAddrContext) -> i32 {
    udp_connect(&ctx);
    1
}

/// The IPv6 side of `udp_connect4`.
#[cgroup_sock_addr(connect6)]
pub fn udp_connect6(ctx: SockAddrContext) -> i32 {
    udp_connect(&ctx);
    1
}

#[inline(always)]
fn udp_connect(ctx: &SockAddrContext) {
    if config!(floor_only) != 0 || config!(upstreams) == 0 {
        return;
    }
    // SAFETY: the program's context; the verifier checks the field access.
    let kind = unsafe { (*ctx.sock_addr).type_ };
    if kind == SOCK_DGRAM && is_target_tgid((bpf_get_current_pid_tgid() >> 32) as u32) {
        total_add(Total::UpstreamConnects);
    }
}

/// A read that returned data starts a request on its connection (unless
/// one is pending); a write that sent data ends the pending one.
///
/// `seen`: the connection's `SOCKETS_SEEN` slot, for a socket's (whose
/// arrivals `sk_data_ready` then looks up).
#[inline(always)]
fn transfer(
    pid_tgid: u64,
    key: u64,
    seen: Option<u32>,
    fd: impl Fn() -> u32,
    reading: bool,
    bytes: u64,
) {
    let ts = now();
    let conn = CONNS.get_ptr_mut(&key);
    if reading {
        match conn {
            // SAFETY: map value.
            Some(c) => unsafe {
                // Everything that arrived until now is consumed by this
                // read (or a later one of the same request).
                let arrived = (*c).arrived_ns;
                let last = (*c).last_arrived_ns;
                (*c).arrived_ns = 0;
                let seen = arrived != 0 && last <= ts;
                if (*c).responded == 0 {
                    (*c).reads += 1;
                    (*c).bytes_in += bytes;
                    if seen {
                        (*c).last_start_ns = last;
                    }
                } else {
                    (*c).start_ns = ts;
                    (*c).last_start_ns = ts;
                    if seen {
                        (*c).start_ns = arrived;
                        (*c).last_start_ns = last;
                        total_add(Total::RequestsFromArrival);
                    }
                    (*c).reads = 1;
                    (*c).responded = 0;
                    (*c).bytes_in = bytes;
                }
            },
            None => {
                let fresh = ConnState {
                    start_ns: ts,
                    last_start_ns: ts,
                    arrived_ns: 0,
                    last_arrived_ns: 0,
                    reads: 1,
                    responded: 0,
                    bytes_in: bytes,
                };
                if let Some(slot) = seen {
                    mark_seen(slot, SEEN_CONN);
                }
                let _ = CONNS.insert(&key, &fresh, 0);
            }
        }
        return;
    }
    match conn {
        // SAFETY: map value.
        Some(c) if unsafe { (*c).responded } == 0 => unsafe {
            (*c).responded = 1;
            emit_request(RequestRecord {
                tgid: (pid_tgid >> 32) as u32,
                tid: pid_tgid as u32,
                fd: fd(),
                reads: (*c).reads,
                bytes_in: (*c).bytes_in.min(u64::from(u32::MAX)) as u32,
                bytes_out: bytes.min(u64::from(u32::MAX)) as u32,
                start_ns: (*c).start_ns,
                end_ns: ts,
                last_start_ns: (*c).last_start_ns,
            });
        },
        _ => total_add(Total::UnpairedWrites),
    }
}

/// `--uprobe` entry: time one call in `uprobe_every` of each thread (its
/// N-th, 2N-th, ... call), and count nesting inside a timed call.
#[uprobe]
pub fn call_entry(_ctx: ProbeContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_target_tgid((pid_tgid >> 32) as u32) {
        return 0;
    }
    let tid = pid_tgid as u32;
    total_add(Total::UprobeCalls);
    let c = match CALLS.get_ptr_mut(&tid) {
        Some(c) => c,
        None => {
            let _ = CALLS.insert(&tid, &CallState::default(), 0);
            let Some(c) = CALLS.get_ptr_mut(&tid) else {
                return 0;
            };
            c
        }
    };
    let every = config!(uprobe_every).max(1);
    // SAFETY: map value, only this thread's probes touch it.
    unsafe {
        if (*c).start_ns != 0 {
            (*c).depth += 1;
            return 0;
        }
        (*c).seq += 1;
        if (*c).seq % every == 0 {
            (*c).depth = 0;
            (*c).start_ns = now();
        }
    }
    0
}

/// `--uprobe` return: ends a timed call (not a nested one).
#[uretprobe]
pub fn call_return(_ctx: RetProbeContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !is_target_tgid(tgid) {
        return 0;
    }
    let tid = pid_tgid as u32;
    let Some(c) = CALLS.get_ptr_mut(&tid) else {
        return 0;
    };
    // SAFETY: map value, only this thread's probes touch it.
    unsafe {
        let start = (*c).start_ns;
        if start == 0 {
            return 0;
        }
        if (*c).depth > 0 {
            (*c).depth -= 1;
            return 0;
        }
        (*c).start_ns = 0;
        emit_request(RequestRecord {
            tgid,
            tid,
            fd: UPROBE_FD,
            reads: 1,
            bytes_in: 0,
            bytes_out: 0,
            start_ns: start,
            end_ns: now(),
            last_start_ns: start,
        });
    }
    0
}
