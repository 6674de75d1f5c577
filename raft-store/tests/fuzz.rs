//! The store's decoders under the seeded mutation fuzzer (`raft_store::fuzz`): no input may
//! panic one. CI runs a short budget; `scripts/fuzz.sh` runs millions.
//!
//! `FUZZ_INPUTS` sets the inputs per decoder (default 20,000), `FUZZ_SEED` the seed (default: a
//! new one each run, printed).

use raft_store::fuzz::{run, run_all, store_targets};

#[test]
fn no_input_panics_a_store_decoder() {
    let failures = run_all(&store_targets(), false, fresh_seed());
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The fuzzer can fail: a decoder that panics on a damaged input is caught.
#[test]
fn a_panicking_decoder_is_caught_with_its_input() {
    let target = raft_store::fuzz::Target {
        name: "panics on a leading zero",
        seeds: vec![b"abc".to_vec()],
        decode: |bytes| assert!(bytes.first() != Some(&0), "leading zero"),
        inputs_min: 0,
    };
    let report = run(&target, 5_000, 1);
    assert!(report.panics > 0, "{report:?}");
    let (input, message) = report.first_panic.expect("the input kept");
    assert_eq!(input.first(), Some(&0));
    assert!(message.contains("leading zero"), "{message}");
}

/// A new seed each run (the second it starts), so CI tries new inputs every time.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
