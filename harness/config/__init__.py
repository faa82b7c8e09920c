"""config: what a run is asked to do: a scenario file as a typed Scenario, the accelerator
catalogue, the matrix expanded into cells, the run's dataset choice (datasetup) and one
invocation's settings (launchconfig)."""
