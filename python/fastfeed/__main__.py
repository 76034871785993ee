"""`python -m fastfeed`: the `fastfeed` command."""

import sys

from fastfeed.cli import main

sys.exit(main())
