"""A local search appliance for tests and trials: `fastfeed emulator`, or `Emulator` in Python.

from fastfeed.emulator import Emulator, Fault

with Emulator(data_dir=tmp_path) as emu:
    ...  # push to f"{emu.url}/xmlfeed", then emu.wait_idle() and check emu.documents("ds")
    ...  # emu.acls("ds") holds per-URL ACLs; emu.groups() what /xmlgroups fed
"""

try:
    import aiohttp  # noqa: F401
except ImportError as exc:  # the server extra is not installed
    raise ImportError(
        "fastfeed's emulator runs on aiohttp: pip install 'fastfeed[server]'"
    ) from exc

from fastfeed.emulator.appliance import Emulator
from fastfeed.emulator.faults import Fault
from fastfeed.emulator.index import Document, Push
from fastfeed.emulator.security import Acl, Membership, Principal

__all__ = ["Acl", "Document", "Emulator", "Fault", "Membership", "Principal", "Push"]
