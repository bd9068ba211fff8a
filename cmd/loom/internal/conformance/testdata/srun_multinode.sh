#!/bin/sh
#SBATCH --job-name=srun-mn
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=3:00
#SBATCH --output=srunmn-%j.out
# srun inside a two-node allocation: by default a step uses every node and
# the job's tasks (2 per node), ranked by block distribution; -l labels
# each line with its task's rank.
echo "batch master=$MASTER_ADDR:$MASTER_PORT"
srun -l sh -c 'echo "task procid=$SLURM_PROCID localid=$SLURM_LOCALID nodeid=$SLURM_NODEID host=$SLURMD_NODENAME ntasks=$SLURM_NTASKS step=$SLURM_STEP_ID stepnodes=$SLURM_STEP_NODELIST master=$MASTER_ADDR:$MASTER_PORT"'
echo "srun1 exit=$?"
# The script sees the highest exit code of the step's tasks.
srun sh -c 'exit 3'
echo "srun2 exit=$?"
srun -N2 -n2 sh -c 'if [ "$SLURM_PROCID" = 1 ]; then exit 5; fi; exit 0'
echo "srun3 exit=$?"
# What steps hold, as sacct's AllocCPUS shows it: one CPU (--exact -c1),
# and all of the job's on one node (2) without --exact.
srun --exact -n1 -c1 true
srun -N1 -n1 true
