//! Builds the eBPF programs (correlator-ebpf) for bpfel-unknown-none with the
//! pinned toolchain and puts the object in OUT_DIR, where `probes` embeds it.
//!
//! aya-build builds in a cargo target directory under OUT_DIR, which is
//! new for every build of this crate with other features or targets:
//! `cargo xtask test` (clippy, the unit tests, the integration tests) built
//! the eBPF crate and its `core` from scratch three times, 45-55 s each on
//! this VM. It builds in one directory per profile under the workspace's
//! target instead (`target/bpf/PROFILE`), where the nested cargo is
//! incremental, and the object is copied to OUT_DIR.
use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata {
        packages,
        target_directory,
        ..
    } = cargo_metadata::MetadataCommand::new()
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
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?;
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "release".into());
    let shared = target_directory.join("bpf").join(profile);
    std::fs::create_dir_all(&shared).with_context(|| format!("cannot create {shared}"))?;
    // SAFETY: the build script is single-threaded here; aya-build reads
    // OUT_DIR from the environment and nothing else does after this.
    unsafe { std::env::set_var("OUT_DIR", shared.as_std_path()) };
    aya_build::build_ebpf([package], Toolchain::Custom("1.98"))?;
    // SAFETY: as above.
    unsafe { std::env::set_var("OUT_DIR", &out_dir) };
    // The objects aya-build wrote, one per binary of the eBPF crate (named
    // for the binary), beside its target directory.
    for entry in std::fs::read_dir(&shared)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let dest = std::path::Path::new(&out_dir).join(entry.file_name());
            std::fs::copy(entry.path(), &dest)
                .with_context(|| format!("cannot copy {:?} to {}", entry.path(), dest.display()))?;
        }
    }
    Ok(())
}
