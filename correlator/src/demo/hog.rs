//! A CPU-bound neighbour: pinned to one CPU, it spins in bursts of random
//! length at random times, preempting whatever else runs there.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::{
    cpu::{pin, set_name},
    stats::Rng,
};

#[derive(Clone, Debug, clap::Args)]
pub struct HogArgs {
    /// CPU to spin on.
    #[arg(long, default_value_t = 1)]
    pub cpu: usize,
    /// Burst length range, ms.
    #[arg(long, default_value_t = 20)]
    pub burst_min_ms: u64,
    #[arg(long, default_value_t = 60)]
    pub burst_max_ms: u64,
    /// Pause between bursts: at least the min, exponential above it with
    /// the range's midpoint as mean (ms).
    #[arg(long, default_value_t = 150)]
    pub pause_min_ms: u64,
    #[arg(long, default_value_t = 700)]
    pub pause_max_ms: u64,
    /// Spin without pauses (a continuous hog).
    #[arg(long)]
    pub continuous: bool,
    /// Nice value (negative: the hog wins the CPU, as a busier neighbour would).
    #[arg(long, default_value_t = -10, allow_hyphen_values = true)]
    pub nice: i32,
}

pub fn run(args: &HogArgs) -> Result<()> {
    set_name("demo-hog");
    pin(args.cpu)?;
    // SAFETY: setpriority on this process; failure (not root) leaves nice 0.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, args.nice) };
    let mut rng = Rng::new(u64::from(std::process::id()) * 0x9e37_79b9);
    loop {
        let burst = if args.continuous {
            Duration::from_secs(3600)
        } else {
            Duration::from_millis(rng.range(args.burst_min_ms, args.burst_max_ms))
        };
        let end = Instant::now() + burst;
        let mut x = 0u64;
        while Instant::now() < end {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // Exponential pauses above a floor (a Poisson process of bursts):
        // uniform pauses are regular enough that a run of 25 bursts shows
        // a phase-coherent rhythm (seen: Rayleigh p = 1e-3), and a
        // sporadic neighbour must not look like a periodic one.
        let (floor, mean) = (
            args.pause_min_ms as f64,
            (args.pause_min_ms + args.pause_max_ms) as f64 / 2.0,
        );
        let exp = -((1.0 - rng.unit()).ln()) * (mean - floor).max(0.0);
        std::thread::sleep(Duration::from_millis((floor + exp.min(10.0 * mean)) as u64));
    }
}
