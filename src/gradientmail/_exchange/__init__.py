"""Asynchronous parameter exchange: the machinery behind ``gradientmail.torch.Exchange``.

Internal: import the public names from :mod:`gradientmail.torch`. ``layout`` names the keys
and the head record (no torch), ``rules`` the outer rules, ``store`` the reading and writing
of versions, ``learner`` one learner's side.
"""
