#!/bin/sh
#SBATCH --job-name=srun-gpus
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --gres=gpu:2
#SBATCH --time=0:30
#SBATCH --output=srungpus-%j.out
# srun --gpus-per-task gives each task its own of the job's GPUs; without
# it every task sees the job's GPUs on the node. The job's own first: which
# of the node's GPUs it has depends on the jobs beside it.
echo "job $SLURM_JOB_GPUS"
srun -l --gpus-per-task=1 sh -c 'echo "own $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"' | sort
srun -l sh -c 'echo "all $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"' | sort
