//! The parts of the fault run that other tools reuse: three `chainstore-node` processes on
//! loopback and the faults done to them ([`cluster`]), and the clients whose calls are recorded
//! ([`workload`]).

pub mod cluster;
pub mod workload;
