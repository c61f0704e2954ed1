"""Coordination patterns built on the mailbox, one module each."""
