"""Preloaded first by each rank's forkserver (harness.run.launch), never imported elsewhere:
importing it makes this process exit when its parent (the rank) ends, and every process it forks
(the DataLoader workers) die with it (harness.run.deathsig). Without it a SIGKILLed launcher's
ranks died but their forkservers and workers lived on: each worker holds the forkserver's liveness
pipe, so neither ever saw the other end."""
from harness.run import deathsig

deathsig.exit_with_parent()
deathsig.forked_children_die_with_this_process()
