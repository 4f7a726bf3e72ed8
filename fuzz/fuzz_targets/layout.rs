#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rucx_fuzz_targets::layout(data));
