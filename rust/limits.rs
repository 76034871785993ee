//! Limits of the protocol that more than one part of the core keeps: below both the records and
//! the writer, which depends on them.

/// The guide: "An XML feed must be less than 1 GB in size." The appliance refuses a feed file
/// of this size or more.
pub const FEED_MAX_BYTES: u64 = 1_000_000_000;

/// No file the builder writes may come closer to `FEED_MAX_BYTES` than this, and no content
/// read from a file may be larger.
pub const HARD_MAX_BYTES: u64 = 950_000_000;

const _: () = assert!(HARD_MAX_BYTES < FEED_MAX_BYTES);
