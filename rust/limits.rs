//! Limits of the protocol that more than one part of the core keeps: below both the records and
//! the writer, which depends on them.

/// The protocol refuses feeds of 1 GB and more; no file may come closer than this, and no
/// content read from a file may be larger.
pub const HARD_MAX_BYTES: u64 = 950_000_000;
