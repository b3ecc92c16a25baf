//! Rebuild when the `bpf-linker` binary changes: the crate has an undeclared
//! dependency on it (see the aya template for the reasoning).
use which::which;

fn main() {
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(e) => println!("cargo:warning=bpf-linker not found ({e}); run xtask/setup.sh"),
    }
}
