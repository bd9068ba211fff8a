#!/bin/sh
#SBATCH --job-name=requeue
#SBATCH --requeue
#SBATCH --time=0:45
#SBATCH --output=requeue-%j.out
# The first run waits to be requeued (scontrol requeue); the second ends.
# Its output file is emptied at each start (Slurm's default --open-mode).
# Each run has a step (srun), which sacct -D lists under its run.
echo "run restart=${SLURM_RESTART_COUNT-<unset>}" >> runs.txt
srun true || echo "srun failed: $?"
if [ ! -e first-run ]; then
  echo "first run started"
  touch first-run
  sleep 40 &
  wait $!
  echo "first run was not requeued"
  exit 1
fi
echo "second run"
