"""The README's demo: what `make demo` runs, on an embedded file:// store in a temp dir."""

from __future__ import annotations

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("claim_race.py")), run_name="__main__")
