"""The engine of the data-loading benchmark: scenarios, data, launch, train loop, metrics,
report."""
