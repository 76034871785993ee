//! What the integration tests share (a module, not a test target of its own).

use fastfeed_core::{FeedType, FeedWriter, Options};
use tempfile::TempDir;

/// A writer of incremental feeds for datasource "docs" into a new temporary directory, which
/// lives as long as the `TempDir` returned with it.
pub fn docs_writer(opts: Options) -> (TempDir, FeedWriter) {
    let dir = tempfile::tempdir().unwrap();
    let writer = FeedWriter::new(dir.path(), "docs", FeedType::Incremental, opts).unwrap();
    (dir, writer)
}
