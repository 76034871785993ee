"""Layered settings: command-line flags win over FASTFEED_* variables, which win over TOML.

Placeholder until the settings file lands; `apply` leaves the parsed arguments unchanged.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def apply(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str]) -> None:
    """Fills the options not given on the command line from the environment and the TOML file."""
