//! Links the static (musl) build with `link/worker-text.ld`: the code a
//! fresh task worker runs and the constants it reads, each placed together
//! so the worker faults them in with 3 and 1 faults instead of ~15 and 3
//! (the script says why; `link/worker_text.py` regenerates it). Placement
//! only: the code and data are the same.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/worker-text.ld");
    let musl = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "musl");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|o| o == "linux");
    if musl && linux {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("link/worker-text.ld");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}
