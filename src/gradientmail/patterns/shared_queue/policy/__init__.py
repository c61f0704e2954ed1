"""The claim policy of ``shared_queue``: which unit a learner claims next.

``preference`` orders the units for a learner, ``view`` walks that order, jumps after a
lost claim and sweeps the shares of learners that left, and ``free_runs`` picks where a
jump lands. The policy decides; the loader (``shared_queue.loader``) does the claiming.
"""
