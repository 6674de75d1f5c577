//! Placeholder: the turmoil simulations (SPEC §8) are not built yet.
