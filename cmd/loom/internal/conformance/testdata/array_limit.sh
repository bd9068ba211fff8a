#!/bin/sh
#SBATCH --job-name=arr
#SBATCH --array=0-5%2
#SBATCH --output=arr-%A_%a.out
#SBATCH --time=0:30
# Six tasks, at most two at a time (%2). Each task counts the tasks running
# beside it when it starts (its own file included) and prints its Slurm
# array variables.
mkdir -p running
touch "running/$SLURM_ARRAY_TASK_ID"
concurrent=$(ls running | wc -l)
echo "task=$SLURM_ARRAY_TASK_ID job=$SLURM_JOB_ID array_job=$SLURM_ARRAY_JOB_ID count=$SLURM_ARRAY_TASK_COUNT min=$SLURM_ARRAY_TASK_MIN max=$SLURM_ARRAY_TASK_MAX concurrent=$concurrent"
sleep 1
rm -f "running/$SLURM_ARRAY_TASK_ID"
