#!/bin/sh
#SBATCH --job-name=srun-cancel
#SBATCH --nodes=2
#SBATCH --time=5:00
#SBATCH --output=srunc-%j.out
# One long task per node; each writes its pid where the test can see it.
srun sh -c 'echo $$ > "$SLURM_SUBMIT_DIR/task-$SLURM_PROCID.pid"; exec sleep 300'
echo "srun exit=$?"
