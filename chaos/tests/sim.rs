//! The simulations CI runs: a fixed list of seeds (each a cluster under faults for 60 simulated
//! seconds), a few random seeds, a determinism check, and `replay` for one seed from the
//! environment (`CHAOS_SEED=<n>`; `CHAOS_LOAD_SECS` overrides the load duration).
//!
//! Thousands of seeds locally: `CHAOS_SEEDS=1000..3000 cargo test --workspace --test sim -- --exact sweep --nocapture`.

use chaos::{run, SimOptions};

/// Simulated seconds of load with faults per seed in CI.
const LOAD_SECS: u64 = 60;

fn check(seed: u64, load_secs: u64) -> chaos::Report {
    let report = run(SimOptions::for_seed(seed, load_secs));
    println!(
        "seed {seed}: {} voters{}, {} shard(s), {:?} simulated, {} faults, trace {:016x} ({} lines), {:?}",
        report.options.voters,
        if report.options.spare {
            " + joining spare"
        } else {
            ""
        },
        report.options.shards,
        report.simulated,
        report.faults.len(),
        report.trace_hash,
        report.trace_lines,
        report.stats
    );
    assert!(report.passed(), "{}", report.failure_text());
    assert!(
        report
            .stats
            .get("authoritative answers checked")
            .copied()
            .unwrap_or(0)
            > 0,
        "the run checked no answer: {:?}",
        report.stats
    );
    report
}

/// Entries that carried the writes of several executions in a run (read off its change feed).
fn shared_entries(report: &chaos::Report) -> u64 {
    report
        .stats
        .get("entries holding writes of several executions")
        .copied()
        .unwrap_or(0)
}

macro_rules! seeds {
    ($($name:ident: $($seed:expr),+;)+) => {
        $(
            #[test]
            fn $name() {
                let mut shared = 0;
                for seed in [$($seed),+] {
                    shared += shared_entries(&check(seed, LOAD_SECS));
                }
                // The crashes must have met entries carrying several requests' writes.
                assert!(shared > 0, "no entry held the writes of several executions");
            }
        )+
    };
}

seeds! {
    seeds_00_03: 0, 1, 2, 3;
    seeds_04_07: 4, 5, 6, 7;
    seeds_08_11: 8, 9, 10, 11;
    seeds_12_15: 12, 13, 14, 15;
    seeds_16_19: 16, 17, 18, 19;
    seeds_20_23: 20, 21, 22, 23;
    seeds_24_27: 24, 25, 26, 27;
    seeds_28_31: 28, 29, 30, 31;
    seeds_32_35: 32, 33, 34, 35;
    seeds_36_39: 36, 37, 38, 39;
    seeds_40_43: 40, 41, 42, 43;
    seeds_44_47: 44, 45, 46, 47;
    seeds_48_51: 48, 49, 50, 51;
    seeds_52_55: 52, 53, 54, 55;
    seeds_56_59: 56, 57, 58, 59;
    seeds_60_63: 60, 61, 62, 63;
}

/// A few seeds nobody chose: new ground on every CI run. A failure prints its seed.
#[test]
fn random_seeds() {
    // The wall clock only picks the seeds; each run is then a function of its seed alone.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    for i in 0..3u64 {
        let seed = (base ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % 1_000_000_007;
        println!("random seed {seed}");
        check(seed, LOAD_SECS);
    }
}

#[test]
fn one_seed_replays_the_same_trace() {
    let first = run(SimOptions::for_seed(424_242, 20));
    let second = run(SimOptions::for_seed(424_242, 20));
    assert!(
        first.trace_lines > 100,
        "the trace recorded the run ({} lines)",
        first.trace_lines
    );
    assert_eq!(
        (first.trace_hash, first.trace_lines),
        (second.trace_hash, second.trace_lines),
        "two runs of one seed diverged; last lines:\n{}\n---\n{}",
        first.tail.join("\n"),
        second.tail.join("\n")
    );
}

/// `CHAOS_LOAD_SECS`, or the CI duration.
fn load_secs() -> u64 {
    std::env::var("CHAOS_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(LOAD_SECS)
}

/// Runs `CHAOS_SEED` alone (skipped when it is not set).
#[test]
fn replay() {
    let Ok(seed) = std::env::var("CHAOS_SEED") else {
        return;
    };
    let seed: u64 = seed.parse().expect("CHAOS_SEED is a number");
    let report = check(seed, load_secs());
    for line in &report.faults {
        println!("fault {line}");
    }
}

/// Runs the seeds in `CHAOS_SEEDS` (`a..b`), reporting every failing one (skipped when unset).
#[test]
fn sweep() {
    let Ok(range) = std::env::var("CHAOS_SEEDS") else {
        return;
    };
    let (a, b) = range.split_once("..").expect("CHAOS_SEEDS=a..b");
    let (a, b): (u64, u64) = (a.parse().expect("a number"), b.parse().expect("a number"));
    let mut failed = Vec::new();
    for seed in a..b {
        let report = run(SimOptions::for_seed(seed, load_secs()));
        if report.passed() {
            println!("seed {seed}: ok, trace {:016x}", report.trace_hash);
        } else {
            println!("seed {seed}: FAILED\n{}", report.failure_text());
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

/// The fixed seeds run clusters of several shards on three nodes and on five (where each node
/// holds only some shards and passes the others' requests on), not only single-group ones.
#[test]
fn the_fixed_seeds_include_sharded_clusters_of_three_and_of_five_nodes() {
    let shapes: Vec<SimOptions> = (0..64)
        .map(|s| SimOptions::for_seed(s, LOAD_SECS))
        .collect();
    for voters in [3, 5] {
        let sharded: Vec<u64> = shapes
            .iter()
            .filter(|o| o.voters == voters && o.shards > 1)
            .map(|o| o.seed)
            .collect();
        println!("sharded seeds of {voters} voters: {sharded:?}");
        assert!(!sharded.is_empty(), "no fixed seed shards {voters} voters");
    }
}
