"""The Slurm batch script (scripts/slurm/dlbench.sbatch) and its check (scripts/slurm_check.sh), without Slurm:
both parse as bash, docs/slurm.md shows the batch script verbatim, and the batch script turns Slurm's
environment into the srun/torchrun command line the docs describe (srun and scontrol are stand-ins that record
their arguments). The real one-node cluster run is scripts/slurm_check.sh itself, which .ci/run runs."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SBATCH = REPO / "scripts" / "slurm" / "dlbench.sbatch"
CHECK = REPO / "scripts" / "slurm_check.sh"


@pytest.mark.parametrize("script", [SBATCH, CHECK], ids=lambda p: p.name)
def test_scripts_parse_as_bash(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_docs_show_the_batch_script_verbatim():
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "slurm.md").read_text(), flags=re.S)
    shown = [b for b in blocks if b.startswith("#!/bin/bash\n#SBATCH")]
    assert shown == [SBATCH.read_text()], "docs/slurm.md must show scripts/slurm/dlbench.sbatch verbatim"


def test_ci_runs_the_slurm_check():
    assert "bash scripts/slurm_check.sh" in (REPO / ".ci" / "run").read_text()


def _run_sbatch(tmp_path, env: dict[str, str], *args: str) -> list[str]:
    """Run the batch script as slurmd would, with stand-ins for scontrol and srun; srun's arguments."""
    bin_dir, record = tmp_path / "bin", tmp_path / "srun.args"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "node7\\nnode8\\n"\n')
    (bin_dir / "srun").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {record}\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "USER": "alice", "SLURM_SUBMIT_DIR": str(REPO),
            "SLURM_JOB_NODELIST": "node[7-8]", "SLURM_JOB_ID": "123456", "SLURM_NNODES": "2", **env}
    result = subprocess.run(["bash", str(SBATCH), *args], env=full, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return record.read_text().splitlines()


def test_batch_script_starts_one_torchrun_per_node_with_one_rank_per_gpu(tmp_path):
    argv = _run_sbatch(tmp_path, {"SLURM_GPUS_ON_NODE": "4"}, "--resume", "results/run-1")
    assert argv == ["--kill-on-bad-exit=1", "torchrun", "--nnodes", "2", "--nproc-per-node", "4",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", "node7:23456", "--rdzv-id", "123456",
                    "run_bench.py", "--resume", "results/run-1"]


def test_batch_script_defaults_to_the_4xV100_scenario(tmp_path):
    argv = _run_sbatch(tmp_path, {"SLURM_GPUS_PER_NODE": "v100:2"})  # no SLURM_GPUS_ON_NODE: the request
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    assert argv[argv.index("run_bench.py") + 1:] == [
        "--scenario", "4xV100", "--data-dir", "/local/scratch/alice/dlbench-data", "--out", f"{REPO}/results"]
