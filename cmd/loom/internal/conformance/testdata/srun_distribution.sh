#!/bin/sh
#SBATCH --job-name=srun-dist
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=3
#SBATCH --time=3:00
#SBATCH --output=srundist-%j.out
# srun -m lays a step's tasks over its nodes as Slurm 22.05 does (measured
# beside it, docs/slurm.md "srun"): cyclic deals the ranks round the nodes,
# plane=N N at a time (its deal also sets the tasks per node). Each task
# says where it ran.
task='echo "task $0 procid=$SLURM_PROCID localid=$SLURM_LOCALID nodeid=$SLURM_NODEID gtids=$SLURM_GTIDS tpn=$SLURM_STEP_TASKS_PER_NODE dist=$SLURM_DISTRIBUTION plane=$SLURM_DIST_PLANESIZE"'
srun -l -m cyclic sh -c "$task" cyclic
srun -l -N2 -n5 -m plane=2 sh -c "$task" plane2n5
srun -l -N2 -n6 -m plane=2 sh -c "$task" plane2n6
srun -l -N2 -n4 -m cyclic:block sh -c "$task" cblock
srun -l sh -c "$task" default
# scontrol show step's Dist= of a running step, asked by the script (its
# tasks hold no credential): task 0 says its step id and waits (at most a
# minute) until the script has looked.
wait_for() { i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; }
dist() {
  name=$1; shift
  rm -f "up-$name-$SLURM_JOB_ID" "go-$name-$SLURM_JOB_ID"
  srun "$@" sh -c 'if [ "$SLURM_PROCID" = 0 ]; then echo "$SLURM_STEP_ID" > "up-$0.tmp" && mv "up-$0.tmp" "up-$0"; i=0; while [ ! -e "go-$0" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; fi' "$name-$SLURM_JOB_ID" &
  wait_for "up-$name-$SLURM_JOB_ID"
  echo "step $name $(scontrol show step "$SLURM_JOB_ID.$(cat "up-$name-$SLURM_JOB_ID")" 2>&1 | grep -o 'Dist=[^ ]*')"
  touch "go-$name-$SLURM_JOB_ID"
  wait
  rm -f "up-$name-$SLURM_JOB_ID" "go-$name-$SLURM_JOB_ID"
}
dist cyclic -m cyclic
dist plane2n6 -N2 -n6 -m plane=2
dist cblock -N2 -n4 -m cyclic:block
dist default
echo "done"
