#!/usr/bin/env bash
# Idempotent set-up: takes a fresh Debian machine of this kind to "ready".
#
# This is a shell script, not an xtask subcommand, because the pinned toolchain
# in rust-toolchain.toml must exist before *any* cargo command can run in this
# repository (RUSTUP_AUTO_INSTALL=0 on these machines).
# Every step prints what it does and skips what is already there.
set -euo pipefail

TOOLCHAIN=1.98
LLVM=22
BPF_LINKER_VERSION=0.13.0
# Debian packages used by the tests and benchmarks (real servers and reference tools).
TEST_PACKAGES=(redis-server memcached nginx-light haproxy stress-ng linux-perf bpftrace wrk prometheus golang-go)
# Debian packages only `cargo xtask corpus record` needs (the corpus's real
# software beside the test packages): installed by `setup.sh --corpus`, so the
# test command's set-up does not fetch a JDK it does not use.
CORPUS_PACKAGES=(openjdk-17-jdk-headless python3)
# Debian packages for looking at the HTML report as a browser draws it
# (`setup.sh --screenshots`; docs/report.md "Screenshots"): headless
# Chromium and a font for its text. No test needs them.
SCREENSHOT_PACKAGES=(chromium fonts-dejavu-core)
WITH_CORPUS=0
WITH_SCREENSHOTS=0
for arg in "$@"; do
    case "$arg" in
        --corpus) WITH_CORPUS=1 ;;
        --screenshots) WITH_SCREENSHOTS=1 ;;
        *) echo "setup: unknown argument $arg (usage: $0 [--corpus] [--screenshots])" >&2; exit 2 ;;
    esac
done

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: must run as root (installs Debian packages, mounts tracefs); try: sudo $0" >&2
        exit 1
    fi
}

apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "Debian packages present: $*"
        return
    fi
    say "installing Debian packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

need_root
apt_install "llvm-${LLVM}-dev" "libpolly-${LLVM}-dev" build-essential pkg-config "${TEST_PACKAGES[@]}"
if [ "$WITH_CORPUS" -eq 1 ]; then
    apt_install "${CORPUS_PACKAGES[@]}"
fi
if [ "$WITH_SCREENSHOTS" -eq 1 ]; then
    apt_install "${SCREENSHOT_PACKAGES[@]}"
fi

# Debian starts these services on install; tests start their own instances on
# private ports, so the system-wide ones are stopped to keep the 2-core VM quiet.
for svc in redis-server memcached nginx prometheus; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        say "stopping system-wide $svc (tests run their own instances)"
        systemctl stop "$svc" || true
    fi
done

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v rustup >/dev/null 2>&1; then
    say "installing rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none
fi
if rustup toolchain list | grep -q "^${TOOLCHAIN}"; then
    say "Rust toolchain ${TOOLCHAIN} present"
else
    say "installing Rust toolchain ${TOOLCHAIN} (rust-src, clippy, rustfmt)"
    rustup toolchain install "${TOOLCHAIN}" --profile minimal --component rust-src,clippy,rustfmt
fi

if command -v bpf-linker >/dev/null 2>&1 && bpf-linker --version 2>/dev/null | grep -q "${BPF_LINKER_VERSION}"; then
    say "bpf-linker ${BPF_LINKER_VERSION} present"
else
    say "building bpf-linker ${BPF_LINKER_VERSION} against LLVM ${LLVM}"
    PATH="/usr/lib/llvm-${LLVM}/bin:$PATH" cargo "+${TOOLCHAIN}" install --locked bpf-linker \
        --version "${BPF_LINKER_VERSION}" --no-default-features --features "llvm-${LLVM}"
fi

# Python packages the tests decode outputs with (the official Perfetto trace
# schema), in a venv of their own: Debian's Python is externally managed.
TEST_VENV=/var/lib/correlator-tests/venv
PY_PACKAGES=(perfetto==0.59.1 protobuf==7.36.2)
if [ -x "$TEST_VENV/bin/python" ] && "$TEST_VENV/bin/python" -c \
    'from perfetto.protos.perfetto.trace import perfetto_trace_pb2' 2>/dev/null; then
    say "test venv present: $TEST_VENV (${PY_PACKAGES[*]})"
else
    say "creating test venv $TEST_VENV with ${PY_PACKAGES[*]}"
    python3 -m venv "$TEST_VENV"
    "$TEST_VENV/bin/pip" install -q "${PY_PACKAGES[@]}"
fi

if [ -d /sys/kernel/tracing/events ]; then
    say "tracefs mounted"
else
    say "mounting tracefs at /sys/kernel/tracing"
    mount -t tracefs nodev /sys/kernel/tracing
fi
say "ready"
