"""A local search appliance for tests and trials: `fastfeed emulator`, or `Emulator` in Python.

from fastfeed.emulator import Emulator, Fault

with Emulator(data_dir=tmp_path) as emu:
    ...  # push to f"{emu.url}/xmlfeed", then emu.wait_idle() and check emu.documents("ds")
"""

from fastfeed.emulator.appliance import Emulator
from fastfeed.emulator.faults import Fault
from fastfeed.emulator.index import Document, Push

__all__ = ["Document", "Emulator", "Fault", "Push"]
