"""Batching strategies."""
