"""Preprocess strategies: where decode, resize, flip and normalise run."""
