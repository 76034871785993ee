"""`python -m fastfeed`: the `fastfeed` command."""

from fastfeed.cli import run

run()
