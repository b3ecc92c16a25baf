//! A thread-per-connection server that calls a backend for every request
//! (`correlator-testkit proxy`): the shape of an application server in
//! front of a database. Each request line is sent to the backend on a
//! connected TCP socket and its reply line read back before the answer.
//! With `--pool N` the workers share N backend connections (fewer than
//! the workers: a connection pool), taken under a lock and waited for on
//! a condition variable when none is free, as a database pool does.
//! With `--udp` each worker sends the line as a datagram on its own
//! connected UDP socket and answers with the datagram that comes back
//! (the backend is then a UDP echo), as a resolver or a UDP cache client
//! does.

use std::{
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream, UdpSocket},
    sync::{Arc, Condvar, Mutex},
};

use anyhow::{Context as _, Result};

/// Arguments of `correlator-testkit proxy`.
#[derive(Clone, Debug, clap::Args)]
pub struct ProxyArgs {
    /// Address to listen on (port 0: any free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// The backend's address (a line server: `testserver`).
    #[arg(long)]
    pub backend: String,
    /// Backend connections shared by all workers (0: one per worker).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// The backend is a UDP echo: each worker connects a UDP socket to it
    /// when its client connects (no pool).
    #[arg(long, conflicts_with = "pool")]
    pub udp: bool,
}

/// A backend connection.
enum Backend {
    /// A TCP connection: its writer and its buffered reader.
    Tcp {
        out: TcpStream,
        reader: BufReader<TcpStream>,
    },
    /// A connected UDP socket: one datagram each way per request.
    Udp(UdpSocket),
}

impl Backend {
    fn connect(addr: &str, udp: bool) -> Result<Self> {
        if udp {
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            socket
                .connect(addr)
                .with_context(|| format!("cannot connect a UDP socket to {addr}"))?;
            return Ok(Self::Udp(socket));
        }
        let out = TcpStream::connect(addr).with_context(|| format!("cannot reach {addr}"))?;
        out.set_nodelay(true)?;
        let reader = BufReader::new(out.try_clone()?);
        Ok(Self::Tcp { out, reader })
    }

    /// Sends one request line and reads its reply line into `reply`.
    fn call(&mut self, line: &str, reply: &mut String) -> std::io::Result<()> {
        reply.clear();
        match self {
            Self::Tcp { out, reader } => {
                out.write_all(line.as_bytes())?;
                reader.read_line(reply).map(|_| ())
            }
            Self::Udp(socket) => {
                socket.send(line.as_bytes())?;
                let mut buf = [0u8; 2048];
                let n = socket.recv(&mut buf)?;
                reply.push_str(&String::from_utf8_lossy(&buf[..n]));
                Ok(())
            }
        }
    }
}

/// The shared pool: free connections, and a condition variable a worker
/// waits on until one is returned.
struct Pool {
    free: Mutex<Vec<Backend>>,
    returned: Condvar,
}

impl Pool {
    fn take(&self) -> Backend {
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(b) = free.pop() {
                return b;
            }
            free = self
                .returned
                .wait(free)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn give_back(&self, b: Backend) {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(b);
        self.returned.notify_one();
    }
}

pub fn run(args: &ProxyArgs) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let pool = (args.pool > 0)
        .then(|| -> Result<Arc<Pool>> {
            let free = (0..args.pool)
                .map(|_| Backend::connect(&args.backend, false))
                .collect::<Result<Vec<_>>>()?;
            Ok(Arc::new(Pool {
                free: Mutex::new(free),
                returned: Condvar::new(),
            }))
        })
        .transpose()?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let pool = pool.clone();
        let own = match &pool {
            Some(_) => None,
            None => Some(Backend::connect(&args.backend, args.udp)?),
        };
        std::thread::Builder::new()
            .name("proxy-worker".into())
            .spawn(move || serve(stream, pool.as_deref(), own))?;
    }
    Ok(())
}

/// One client connection: each line is answered with the backend's reply.
fn serve(stream: TcpStream, pool: Option<&Pool>, mut own: Option<Backend>) {
    let _ = stream.set_nodelay(true);
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let (mut line, mut reply) = (String::new(), String::new());
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let called = match (&mut own, pool) {
            (Some(b), _) => b.call(&line, &mut reply),
            (None, Some(p)) => {
                let mut b = p.take();
                let r = b.call(&line, &mut reply);
                p.give_back(b);
                r
            }
            (None, None) => return,
        };
        if called.is_err() || out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
