#!/bin/sh
#SBATCH --job-name=srun-gpt-jobgpn
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --time=1:00
#SBATCH --output=srungptjobgpn-%j.out
# A step's own --gpus-per-task beside the job's --gpus-per-node
# (SLURM_GPUS_PER_NODE, srun's default): Slurm 22.05's step keeps both and
# gets the larger on each node, the node's tasks times --gpus-per-task or
# the job's 2; a node's lone task sees all of the step's GPUs there, two
# tasks one GPU each of their own. scontrol show step says what the
# running step asked.
# Counts only: which of a node's GPUs the job has depends on the jobs
# beside it.
task='n=$(echo "$CUDA_VISIBLE_DEVICES" | tr , "\n" | grep -c .); echo "$0: rank $SLURM_PROCID node $SLURM_NODEID gpus $n"'
echo "job: gpus-per-node=$SLURM_GPUS_PER_NODE gpus=$SLURM_GPUS gpus-per-task=$SLURM_GPUS_PER_TASK"
srun -n2 --gpus-per-task=1 sh -c "$task" n2g1 | sort
srun -n4 --gpus-per-task=1 sh -c "$task" n4g1 | sort
srun -n2 --gpus-per-task=2 sh -c "$task" n2g2 | sort
# A running step's record, asked by the script while task 0 waits for it
# (a minute at most).
rm -f "up-$SLURM_JOB_ID" "go-$SLURM_JOB_ID"
srun -n2 --gpus-per-task=1 sh -c 'if [ "$SLURM_PROCID" = 0 ]; then echo "$SLURM_STEP_ID" > "up-$0.tmp" && mv "up-$0.tmp" "up-$0"; i=0; while [ ! -e "go-$0" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; fi' "$SLURM_JOB_ID" &
i=0; while [ ! -e "up-$SLURM_JOB_ID" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
echo "step: $(scontrol show step "$SLURM_JOB_ID.$(cat "up-$SLURM_JOB_ID")" 2>&1 | grep -o 'TresBind=[^ ]*\|TresPer[A-Za-z]*=[^ ]*' | tr '\n' ' ')"
touch "go-$SLURM_JOB_ID"
wait
rm -f "up-$SLURM_JOB_ID" "go-$SLURM_JOB_ID"
echo done
