"""run: the processes of a run: spawn or join the ranks (launch), watch them (supervisor), each
rank's loop over the cells and repeats (rankloop), the machine probe run beside them (probe), a
stopped run resumed (resume), a [remote] scenario's session around the run (remoterun), and a bench
request settled once before anything runs (settle: the main run's and --loader-only's common
start)."""
