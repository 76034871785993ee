//! fastfeed's core: turns records into valid, lossless, size-capped search appliance feeds.
//!
//! Everything here is plain Rust; `bindings` (behind the `python` feature) is the only module
//! that knows about Python.

pub mod acl;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod allocator;
pub mod arrow;
pub mod encode;
pub mod error;
pub mod escape;
pub mod fingerprint;
pub mod groups;
pub mod guard;
#[cfg(feature = "parquet")]
pub mod ipc;
pub mod jsonl;
mod lift;
pub mod limits;
#[cfg(feature = "parquet")]
pub mod mapped;
mod output;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod record;
pub mod row_json;
pub mod spill;
pub mod thunderstone;
pub mod url;
pub mod walk;
pub mod wide;
pub mod writer;

#[cfg(feature = "python")]
mod bindings;

pub use error::{Error, Result};
pub use record::{Action, AuthMethod, Content, FeedType, Record, Timestamp};
pub use writer::{FeedWriter, ManifestEntry, Options};

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;
