//! Symbolization cost (`correlator-testkit symbench`; `cargo xtask bench
//! symbols`): 10,000 unique stacks of real code addresses, a kernel and a
//! user stack each, symbolized as at the end of a run.
//!
//! User addresses are spread over this process's executable mappings
//! (correlator's own text with its symbols, and the libraries), kernel
//! addresses over the text symbols of /proc/kallsyms: every stack is unique
//! and most addresses are too, which is harder than real stacks (which
//! share their outer frames).

use anyhow::{Context as _, Result, bail};

use crate::{stats::Rng, symbols, timeline::stacks::RawStacks};

#[derive(Clone, Debug, clap::Args)]
pub struct SymbenchArgs {
    #[arg(long, default_value_t = 10_000)]
    pub stacks: u32,
    /// Frames per stack (kernel and user each).
    #[arg(long, default_value_t = 16)]
    pub depth: usize,
}

/// Executable mappings of this process, as (start, end).
fn text_ranges() -> Result<Vec<(u64, u64)>> {
    let maps = std::fs::read_to_string("/proc/self/maps").context("reading /proc/self/maps")?;
    Ok(maps
        .lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .filter(|l| l.contains('/'))
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect())
}

/// Kernel text symbol addresses (needs root: otherwise they read as 0).
fn kernel_text() -> Result<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
    let addrs: Vec<u64> = text
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            let addr = u64::from_str_radix(p.next()?, 16).ok()?;
            let kind = p.next()?;
            (matches!(kind, "t" | "T") && addr != 0).then_some(addr)
        })
        .collect();
    if addrs.is_empty() {
        bail!("/proc/kallsyms shows no addresses (run as root)");
    }
    Ok(addrs)
}

pub fn run(args: &SymbenchArgs) -> Result<()> {
    let ranges = text_ranges()?;
    let kernel = kernel_text()?;
    let mut rng = Rng::new(7);
    let mut raw = RawStacks::default();
    for id in 0..args.stacks {
        let user: Vec<u64> = (0..args.depth)
            .map(|_| {
                let (a, b) = ranges[rng.below(ranges.len())];
                a + rng.range(0, b - a - 1)
            })
            .collect();
        let kern: Vec<u64> = (0..args.depth)
            .map(|_| kernel[rng.below(kernel.len())] + rng.range(0, 15))
            .collect();
        raw.user.insert(id, user);
        raw.kernel.insert(id, kern);
    }
    let start = std::time::Instant::now();
    let table = symbols::symbolize(std::process::id(), &raw);
    let took = start.elapsed();
    println!(
        "symbolized {} unique stacks ({} kernel + {} user frames each; {} distinct names) in {:.3} s",
        args.stacks,
        args.depth,
        args.depth,
        table.symbols.len(),
        took.as_secs_f64()
    );
    Ok(())
}
