"""Checks GSA feed files and groups feed files: `validate_file` (`fastfeed validate`).

The checker is defined in `fastfeed.sets.validate`, below the receivers, because the emulated
appliance checks what it receives with it too and imports no receiver."""

from fastfeed.sets.validate import (
    FEEDTYPES,
    INHERITANCE_TYPES,
    OWN_DTD,
    PUBLIC_ID,
    ROOTS,
    Problem,
    declares,
    validate_file,
)

__all__ = [
    "FEEDTYPES",
    "INHERITANCE_TYPES",
    "OWN_DTD",
    "PUBLIC_ID",
    "ROOTS",
    "Problem",
    "declares",
    "validate_file",
]
