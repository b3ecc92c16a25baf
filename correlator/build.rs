//! Builds the eBPF programs (correlator-ebpf) for bpfel-unknown-none with the
//! pinned toolchain and puts the object in OUT_DIR, where `probes` embeds it.
use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("MetadataCommand::exec")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "correlator-ebpf")
        .ok_or_else(|| anyhow!("correlator-ebpf package not found"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    let package = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir: root_dir.as_str(),
        ..Default::default()
    };
    aya_build::build_ebpf([package], Toolchain::Custom("1.98"))
}
