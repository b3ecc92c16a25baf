//! The in-repo test server (`correlator-testkit testserver`, hidden): answers the
//! line protocol (and HTTP/1.1 GET) in microseconds, and stalls the whole
//! server for `stall` on every `stall_every`-th request, the classic
//! coordinated-omission demonstration. A thread per connection; one global
//! lock held while a request is served, so a stall blocks every connection
//! as a GC pause or a held lock would.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, Result};

#[derive(Clone, Debug, clap::Args)]
pub struct TestServerArgs {
    /// Address to listen on (port 0: any free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Stall on every Nth request (0: never).
    #[arg(long, default_value_t = 0)]
    pub stall_every: u64,
    /// How long a stall lasts.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub stall: Duration,
}

pub fn run(args: &TestServerArgs) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    std::io::stdout().flush()?;
    let state = Arc::new(Mutex::new(0u64));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (state, args) = (Arc::clone(&state), args.clone());
        std::thread::spawn(move || serve(stream, &state, &args));
    }
    Ok(())
}

fn serve(stream: TcpStream, served: &Mutex<u64>, args: &TestServerArgs) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut out = std::io::BufWriter::new(write_half);
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let http = line.starts_with("GET ");
        if http {
            // Skip the headers up to the empty line.
            let mut header = String::new();
            loop {
                header.clear();
                match reader.read_line(&mut header) {
                    Ok(0) | Err(_) => return,
                    Ok(_) if header == "\r\n" || header == "\n" => break,
                    Ok(_) => {}
                }
            }
        }
        {
            let mut n = served
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *n += 1;
            if args.stall_every > 0 && (*n).is_multiple_of(args.stall_every) {
                std::thread::sleep(args.stall);
            }
        }
        let reply: &[u8] = if http {
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
        } else {
            b"ok\n"
        };
        if out.write_all(reply).is_err() {
            return;
        }
        // Answer pipelined requests in one write when more are buffered.
        if !reader.buffer().contains(&b'\n') && out.flush().is_err() {
            return;
        }
    }
}
