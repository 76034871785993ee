"""What every kind of set shares: the writer base, the build pipeline (inputs to files), the
manifest that lists a set's files and the journal of what a target accepted."""
