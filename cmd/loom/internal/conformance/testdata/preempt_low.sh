#!/bin/sh
#SBATCH --job-name=low
#SBATCH --partition=low
#SBATCH --gres=gpu:2
#SBATCH --requeue
#SBATCH --signal=B:USR1@10
#SBATCH --output=low-%j.out
#SBATCH --open-mode=append
# Holds every GPU of the node until preempted. Preemption sends --signal's
# USR1 first: the trap writes a checkpoint. The run after the requeue
# resumes from it and ends. Its output keeps every run's (--open-mode=append).
if [ -e checkpoint ]; then
  echo "resumed from $(cat checkpoint)"
  exit 0
fi
trap 'echo step-42 > checkpoint; echo checkpointed' USR1
echo "low started"
touch low-running
while :; do
  sleep 1 &
  wait $!
done
