"""The README's demo (`make demo`): four learners of unequal speed train one model.

They share one dataset through a shared queue and one model through an ``Exchange``, and
the demo then compares the shared model's held-out loss, at the same wall time and on the
same sequences, with its two peers: the fastest learner alone, and lockstep with batches in
proportion to speed. It runs ``train_shared_queue.py`` on an embedded ``file://`` store in
a temporary directory: no network, no GPU. See that file for what happens and what is
printed; ``train_ddp.py`` trains one model on every rank with DDP.
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
