#!/bin/sh
#SBATCH --job-name=nodefail
#SBATCH --requeue
#SBATCH --time=1:00
#SBATCH --output=nodefail-%j.out
# The first run records its process (the test then kills its node); the
# run after the requeue records where it ran and ends.
echo "run host=${SLURMD_NODENAME-<unset>} nodes=$SLURM_JOB_NODELIST restart=${SLURM_RESTART_COUNT-<unset>}" >> runs.txt
if [ ! -e first-run ]; then
  echo $$ > first-run
  sleep 55 &
  wait $!
  echo "the node did not fail"
  exit 1
fi
echo "second run"
