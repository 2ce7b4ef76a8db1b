//! Tells the tests whether the build host can run the AVX-512 engine, so a
//! test that needs it shows as ignored, with the reason, where it cannot run
//! (the library itself detects CPU features at run time and ignores this).

fn main() {
    println!("cargo:rustc-check-cfg=cfg(csumkit_avx512_host)");
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(target_arch = "x86_64")]
    {
        let native = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
        if native
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
        {
            println!("cargo:rustc-cfg=csumkit_avx512_host");
        }
    }
}
