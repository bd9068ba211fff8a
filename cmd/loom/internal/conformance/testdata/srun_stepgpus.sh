#!/bin/sh
#SBATCH --job-name=srun-stepgpus
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --gres=gpu:4
#SBATCH --time=1:00
#SBATCH --output=srunstepgpus-%j.out
#SBATCH --error=srunstepgpus-%j.err
# A step's --gpus, --gpus-per-node and --gres=gpu:N decide which of the
# job's GPUs it gets (every task of the node sees them all) and holds, as
# Slurm 22.05's: a step beside one that holds GPUs gets others, and one
# that needs those held waits ("step creation temporarily disabled").
d=stepgpus-$SLURM_JOB_ID
mkdir -p "$d"
srun -n2 --gpus=2 sh -c 'echo "gpus=2: $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"' | sort
srun -n1 --gpus-per-node=3 sh -c 'echo "gpus-per-node=3: $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"'
srun -n1 --gres=gpu:1 sh -c 'echo "gres=gpu:1: $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"'
# A step holding GPUs 0-2 until the step after it has been told to wait
# (this job's errors; 30 s at most, long only for a run where it never
# is); a fixed time would let a loaded machine end it too early.
srun --exact -n1 --gpus=3 sh -c "echo holder: \$CUDA_VISIBLE_DEVICES >$d/holder; i=0; until grep -q 'step creation temporarily disabled' srunstepgpus-$SLURM_JOB_ID.err || [ \$i -ge 300 ]; do sleep 0.1; i=\$((i+1)); done; touch $d/holder.end" &
while [ ! -s "$d/holder" ]; do sleep 0.1; done
srun --exact -n1 --gpus=1 sh -c "[ -e $d/holder.end ] && r=after || r=beside; echo \"gpus=1 \$r: \$CUDA_VISIBLE_DEVICES\""
srun --exact -n1 --gpus=2 sh -c "[ -e $d/holder.end ] && r=after || r=beside; echo \"gpus=2 \$r: \$CUDA_VISIBLE_DEVICES\""
wait
cat "$d/holder"
srun -n1 --gpus=5 true || echo "gpus=5: refused"
