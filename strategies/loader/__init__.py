"""Loader strategies: DataLoader worker processes or a thread pool in the rank."""
