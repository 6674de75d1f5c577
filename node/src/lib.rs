//! Placeholder: the cluster server is specified in SPEC §5–§6 and not built yet.
