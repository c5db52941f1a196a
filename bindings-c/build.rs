//! Sets the shared library's SONAME: `libsluicegate.so.0` (the ABI's major version: bump it
//! with any incompatible change to include/sluicegate.h).

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsluicegate.so.0");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
