"""The DataLoader adapter behind :mod:`gradientmail.torch`: the dataset, the loader, and the
shared memory by which the training loop tells the workers which batches it took."""
