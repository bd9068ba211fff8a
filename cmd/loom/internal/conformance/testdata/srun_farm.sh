#!/bin/sh
#SBATCH --job-name=srun-farm
#SBATCH --nodes=1
#SBATCH --ntasks=3
#SBATCH --gres=gpu:3
#SBATCH --time=0:30
#SBATCH --output=srunfarm-%j.out
# A task farm: one-GPU steps started side by side each get a GPU of their
# own (with --exact a step takes only its task's CPU, so they run at once).
# Each step says which GPU it has once all three run (30 s at most, long
# only for a run where they never do): a fixed sleep would let a loaded
# machine end a step, and free its GPU, before the last one starts.
started=farm-$SLURM_JOB_ID.started
mkdir -p "$started"
export started
for i in 0 1 2; do
  srun --exact -n1 --gpus-per-task=1 sh -c 'touch "$started/$SLURM_STEP_ID"; n=0; while [ "$(ls "$started" | wc -l)" -lt 3 ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done; echo "$CUDA_VISIBLE_DEVICES"' >"farm-$SLURM_JOB_ID-$i.txt" &
done
wait
cat "farm-$SLURM_JOB_ID"-*.txt | sort | tr '\n' ' '
echo
