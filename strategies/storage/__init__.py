"""Storage strategies: how samples lie on disk and how a batch is read back."""
