"""Loader strategies: each builds the rank's loader (Loader.pipeline): DataLoader worker processes,
or threads of the rank (a pool of ours, torchdata.nodes', SPDL's)."""
