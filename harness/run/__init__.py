"""run: the processes of a run: spawn or join the ranks (launch), watch them (supervisor), each rank's loop
over the cells and repeats (cellruns) and the machine probe run beside them (probe)."""
