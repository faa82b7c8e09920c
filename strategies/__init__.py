"""Strategy plugins, one small module per strategy, grouped by axis.

This package never imports ``harness``. The harness finds strategies through
:mod:`strategies.registry`.
"""
