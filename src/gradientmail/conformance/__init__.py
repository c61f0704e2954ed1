"""The conformance suite: proves a store is safe to coordinate on, or shows why not."""
