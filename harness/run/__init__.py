"""run: the processes of a run: spawn or join the ranks (launch), watch them (supervisor), each rank's loop
over the cells and repeats (rankloop), the machine probe run beside them (probe), a stopped run resumed
(resume) and a [remote] scenario's session around the run (remoterun); and the runs beside the matrix: the
read-path benchmark of --loader-only (loaderonly_bench, written by loaderonly_run), the prediction checks'
launches and side measurements (calibration), the A/B gate's interleaved runs (abruns), check-remote's sweep
over shaped links (remotesweep), the fidelity self-test (fidelity) and the OOM injection on two ranks
(oominject)."""
