"""train: one cell on one rank: the input pipeline (pipeline, torchdataset, devprep; the loader
strategy builds the loader), where batches come from (batches), the per-step agreement of the ranks
(agreement), one DDP step with its OOM policy (ddpstep), the warm-up and measured window of one
phase (measuredloop) and one cell's model, phases and skip (trainloop)."""
