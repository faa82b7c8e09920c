"""Sampler strategies."""
