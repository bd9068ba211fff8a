#!/bin/sh
#SBATCH --job-name=high
#SBATCH --partition=high
#SBATCH --gres=gpu:2
#SBATCH --output=high-%j.out
# The higher priority tier's partition: it preempts the low job.
echo "high ran"
