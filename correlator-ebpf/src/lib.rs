#![no_std]
// Empty: the programs are the `correlator` binary target (src/main.rs).
