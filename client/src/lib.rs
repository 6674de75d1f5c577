//! Placeholder: the typed client and `chainctl` (SPEC §7) are not built yet.
