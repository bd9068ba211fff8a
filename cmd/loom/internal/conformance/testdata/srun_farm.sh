#!/bin/sh
#SBATCH --job-name=srun-farm
#SBATCH --nodes=1
#SBATCH --ntasks=3
#SBATCH --gres=gpu:3
#SBATCH --time=0:30
#SBATCH --output=srunfarm-%j.out
# A task farm: one-GPU steps started side by side each get a GPU of their
# own (with --exact a step takes only its task's CPU, so they run at once).
for i in 0 1 2; do
  srun --exact -n1 --gpus-per-task=1 sh -c 'sleep 3; echo "$CUDA_VISIBLE_DEVICES"' >"farm-$SLURM_JOB_ID-$i.txt" &
done
wait
cat "farm-$SLURM_JOB_ID"-*.txt | sort | tr '\n' ' '
echo
