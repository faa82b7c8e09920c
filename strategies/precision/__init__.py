"""Precision strategies: the arithmetic of the training step."""
