#!/bin/sh
#SBATCH --job-name=srun-nodes
#SBATCH --nodes=2
#SBATCH --time=1:00
#SBATCH --output=srunnodes-%j.out
# srun -w, -x and -r pick the nodes of the allocation a step runs on
# (Ray's and other frameworks' launch scripts start a head on one node and
# workers on the others this way); SLURM_NODEID counts within the step.
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
second=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n 1)
export first second
where='if [ "$SLURMD_NODENAME" = "$first" ]; then n=first; else n=second; fi; echo "$0: $n, node id $SLURM_NODEID of $SLURM_NNODES"'
srun -N1 -n1 -w "$second" sh -c "$where" w-second
srun -N1 -n1 -w "$first" sh -c "$where" w-first
srun -N1 -n1 -x "$first" sh -c "$where" x-first
srun -N1 -n1 -r 1 sh -c "$where" r-1
srun -n2 -w "$second" sh -c "$where" w-second-two-tasks | sort
srun -N1 -n1 -w nosuchnode true 2>/dev/null || echo "a node outside the job: refused"
# More nodes named than -N: srun keeps the first (and says so on stderr).
srun -N1 -n1 -w "$first,$second" sh -c "$where" w-both-for-one 2>/dev/null
