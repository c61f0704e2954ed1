"""The README's demo (`make demo`): four learners of unequal speed share one training run.

It runs ``train_shared_queue.py`` on an embedded ``file://`` store in a temporary directory:
no network, no GPU. See that file for what happens and what is printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Worker processes are spawned and must import the learner function from a real module,
# so the example is imported rather than run with runpy.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_shared_queue import main  # needs the path set just above

if __name__ == "__main__":
    sys.exit(main())
