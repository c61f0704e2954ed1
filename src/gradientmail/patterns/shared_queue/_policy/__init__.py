"""The claim policy of ``shared_queue``: which unit a learner claims next.

:class:`ClaimPolicy` is the one door: it is handed a :class:`PageReader` (it does no I/O
of its own), told the outcome of each claim, and says where to claim next. Inside it,
``preference`` orders the units for a learner, ``walk`` follows that order, and
``free_runs`` holds what the learner believes taken and picks where a jump lands. The
policy decides; the loader (``shared_queue.loader``) does the claiming.
"""

from gradientmail.patterns.shared_queue._policy.claim_policy import ClaimPolicy
from gradientmail.patterns.shared_queue._policy.free_runs import PAGE, PageReader

__all__ = ["PAGE", "ClaimPolicy", "PageReader"]
