"""run: the processes of a run: spawn or join the ranks (launch), watch them (supervisor), each rank's loop
over the cells and repeats (rankloop) and the machine probe run beside them (probe); and the runs beside the
matrix: the read-path benchmark of --loader-only (loaderonly_bench), the prediction checks' launches and side
measurements (calibration), the fidelity self-test (fidelity) and the OOM injection on two ranks (oominject)."""
