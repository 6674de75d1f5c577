//! Bytes read back from the engine that do not decode become `StorageError::Corrupted`: never a
//! panic, never a guessed answer. Also: the format record gates opening a store.

mod common;

use chainstore_model::StorageError;
use common::*;
use proptest::prelude::*;
use raft_store::engine::{Engine, WriteBatch};
use raft_store::{ChainStore, MemEngine, OpenError, StoreConfig, FORMAT_VERSION};

#[test]
fn a_store_of_an_unknown_format_refuses_to_open() {
    let engine = MemEngine::new();
    let mut batch = WriteBatch::new();
    batch.put(
        b"m/format".to_vec(),
        (FORMAT_VERSION + 1).to_be_bytes().to_vec(),
    );
    engine.write(batch).unwrap();
    let err = ChainStore::open(engine, StoreConfig::default()).err();
    assert_eq!(
        err,
        Some(OpenError::UnknownFormat {
            found: FORMAT_VERSION + 1
        })
    );
}

#[test]
fn an_engine_with_data_but_no_format_record_refuses_to_open() {
    let engine = MemEngine::new();
    let mut batch = WriteBatch::new();
    batch.put(b"cfoo/h".to_vec(), b"whatever".to_vec());
    engine.write(batch).unwrap();
    assert_eq!(
        ChainStore::open(engine, StoreConfig::default()).err(),
        Some(OpenError::NoFormatRecord)
    );
}

#[test]
fn a_damaged_format_record_is_corrupted() {
    let engine = MemEngine::new();
    let mut batch = WriteBatch::new();
    batch.put(b"m/format".to_vec(), b"\x01".to_vec());
    engine.write(batch).unwrap();
    assert!(matches!(
        ChainStore::open(engine, StoreConfig::default()).err(),
        Some(OpenError::Storage(StorageError::Corrupted(_)))
    ));
}

#[test]
fn reopening_a_store_keeps_its_data_and_format() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = rocks_store(dir.path());
        store
            .populate_from_log(&exec("x"), &linked_log(&["a", "b"]), 1)
            .unwrap();
    }
    let store = rocks_store(dir.path());
    assert_eq!(ids(&store.chain(&exec("x")).unwrap()), ["a", "b"]);
}

/// A store with one execution of every kind of record.
fn populated() -> (MemEngine, ChainStore<MemEngine>) {
    let (engine, store) = mem_store();
    store
        .populate_from_log(&exec("x"), &linked_log(&["a", "b", "c"]), 5)
        .unwrap();
    store.append(&exec("y"), &genesis("g"), 6).unwrap();
    (engine, store)
}

/// Runs every read and write against the store; each must return `Ok` or `Corrupted`. An `Ok`
/// is given as its answer's debug text.
fn exercise(store: &ChainStore<MemEngine>) -> Vec<Result<String, StorageError>> {
    fn text<T: std::fmt::Debug>(result: Result<T, StorageError>) -> Result<String, StorageError> {
        result.map(|answer| format!("{answer:?}"))
    }
    let mut results = Vec::new();
    for name in ["x", "y"] {
        let x = exec(name);
        results.push(text(store.chain(&x)));
        results.push(text(store.chain_if_authoritative(&x)));
        results.push(text(store.state(&x)));
        results.push(text(store.walk_from_head(&x)));
        results.push(text(store.event(&x, &eid("b"))));
        results.push(text(store.authority(&x)));
        results.push(text(store.coverage(&x)));
        results.push(text(store.head(&x)));
        results.push(text(store.append(&x, &req("b", Some("a")), 9).map_err(
            |e| match e {
                chainstore_model::AppendError::Storage(s) => s,
                other => StorageError::io(
                    std::io::ErrorKind::Other,
                    format!("not a storage error: {other}"),
                ),
            },
        )));
    }
    results.push(text(store.changes(0, 100)));
    results
}

#[test]
fn every_damaged_record_reads_as_corrupted_not_a_panic() {
    let keys: Vec<Vec<u8>> = populated().0.dump().into_iter().map(|(k, _)| k).collect();
    assert!(keys.len() > 10);
    let garbage: [&[u8]; 4] = [
        b"",
        b"\x00",
        b"\x01\x00\x00\x00\x00\x00\x00\x00\x05\xff",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    ];
    let mut corrupted_seen = 0;
    for key in keys.iter().filter(|k| k.as_slice() != b"m/format") {
        for bytes in garbage {
            let (engine, store) = populated();
            let mut batch = WriteBatch::new();
            batch.put(key.clone(), bytes.to_vec());
            engine.write(batch).unwrap();
            for result in exercise(&store) {
                match result {
                    Ok(_) | Err(StorageError::Corrupted(_)) => {}
                    Err(StorageError::Io { message, .. })
                        if message.starts_with("not a storage error") => {}
                    Err(other) => {
                        panic!("{:?} = {bytes:?}: {other:?}", String::from_utf8_lossy(key))
                    }
                }
            }
            corrupted_seen += exercise(&store)
                .iter()
                .filter(|r| matches!(r, Err(StorageError::Corrupted(_))))
                .count();
        }
    }
    assert!(corrupted_seen > 0);
}

#[test]
fn a_damaged_event_makes_the_guarded_read_an_error_not_an_answer() {
    let (engine, store) = populated();
    let event_key = engine
        .dump()
        .into_iter()
        .map(|(k, _)| k)
        .find(|k| k.starts_with(b"cx/s"))
        .unwrap();
    let mut batch = WriteBatch::new();
    batch.put(event_key, b"\x01garbage".to_vec());
    engine.write(batch).unwrap();
    assert!(matches!(
        store.chain_if_authoritative(&exec("x")),
        Err(StorageError::Corrupted(_))
    ));
}

proptest! {
    #[test]
    fn random_bytes_in_any_record_never_panic(index in any::<prop::sample::Index>(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let (engine, store) = populated();
        let keys: Vec<Vec<u8>> = engine.dump().into_iter().map(|(k, _)| k).collect();
        let mut batch = WriteBatch::new();
        batch.put(index.get(&keys).clone(), bytes);
        engine.write(batch).unwrap();
        let _ = exercise(&store);
        let _ = ChainStore::open(engine, StoreConfig::default());
    }
}

#[test]
fn a_flipped_bit_in_any_stored_value_is_caught_by_its_checksum() {
    let undamaged = exercise(&populated().1);
    let (engine, _) = populated();
    let records: Vec<(Vec<u8>, usize)> = engine
        .dump()
        .into_iter()
        .map(|(k, v)| (k, v.len() + raft_store::engine::CHECKSUM_BYTES))
        .collect();
    for (nth, (key, stored_len)) in records.iter().enumerate() {
        // The first and last bit of the value, one in its middle, and one in the checksum.
        for bit in [
            0,
            stored_len * 4,
            (stored_len - 1) * 8 - 1,
            stored_len * 8 - 1,
        ] {
            let (engine, store) = populated();
            assert_eq!(engine.corrupt_stored(nth, bit).as_ref(), Some(key));
            let name = String::from_utf8_lossy(key);
            assert!(
                matches!(engine.get(key), Err(StorageError::Corrupted(_))),
                "{name}, bit {bit}: read back without complaint"
            );
            for (answer, truth) in exercise(&store).into_iter().zip(&undamaged) {
                match answer {
                    Err(StorageError::Corrupted(_)) => {}
                    answer => assert_eq!(
                        &answer, truth,
                        "{name}, bit {bit}: an answer other than the undamaged store's"
                    ),
                }
            }
            match ChainStore::open(engine, StoreConfig::default()) {
                Ok(_) | Err(OpenError::Storage(StorageError::Corrupted(_))) => {}
                Err(other) => panic!("{name}, bit {bit}: opening said {other:?}"),
            }
        }
    }
}

#[test]
fn a_value_under_another_key_or_cut_short_is_corrupted() {
    use raft_store::engine::{seal, unseal};
    let sealed = seal(b"key", b"value".to_vec());
    assert_eq!(unseal(b"key", sealed.clone()).unwrap(), b"value");
    assert!(matches!(
        unseal(b"kez", sealed.clone()),
        Err(StorageError::Corrupted(_))
    ));
    for cut in 0..sealed.len() {
        assert!(matches!(
            unseal(b"key", sealed[..cut].to_vec()),
            Err(StorageError::Corrupted(_))
        ));
    }
}
