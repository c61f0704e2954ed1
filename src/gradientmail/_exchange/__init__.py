"""Asynchronous parameter exchange: the machinery behind ``gradientmail.torch.Exchange``.

Internal: import the public names from :mod:`gradientmail.torch`. ``layout`` names the keys,
the head record and the layout checks (no torch); ``tensors`` a model's shared tensors and
the wire codec; ``store`` the requests that read and write versions; ``reader`` the one door
for reading the current version; ``watch`` the checks of every head read; ``rules`` the
outer rules; ``membership`` a learner's ledger entry; ``applier`` the exchange thread's
side; ``handoff`` the thread itself and the counters (``stats``); ``options`` the arguments,
checked in one place; ``learner`` the ``Exchange``; ``loading`` ``load_shared``; ``sampler``
the DataLoader's ``ExchangeBatchSampler``; ``report`` what ``gradientmail status`` shows.
"""
