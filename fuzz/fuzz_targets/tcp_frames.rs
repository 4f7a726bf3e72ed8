#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rucx_fuzz_targets::tcp_frames(data));
