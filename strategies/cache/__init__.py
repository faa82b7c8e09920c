"""Cache strategies."""
