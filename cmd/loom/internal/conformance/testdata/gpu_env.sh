#!/bin/sh
#SBATCH --time=0:30
# The batch script's GPU request variables (srun's defaults): what sbatch's
# GPU options put there. The job's options come on the command line.
echo "gpus=$SLURM_GPUS gpus-per-node=$SLURM_GPUS_PER_NODE gpus-per-task=$SLURM_GPUS_PER_TASK"
