#!/bin/bash
#SBATCH --job-name=acct
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=5:00
#SBATCH --output=acct-%j.out
# Each task holds about 30 MB (a shell variable) until the test releases it.
srun bash -c 'x=$(head -c 30000000 /dev/zero | tr "\0" a); touch "$SLURM_SUBMIT_DIR/held-$SLURM_PROCID"
while [ ! -e "$SLURM_SUBMIT_DIR/release" ]; do sleep 0.1; done; echo "task $SLURM_PROCID held ${#x}"'
echo "srun exit=$?"
