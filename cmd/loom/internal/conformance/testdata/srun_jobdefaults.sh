#!/bin/sh
#SBATCH --job-name=srun-jobdefaults
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --distribution=cyclic
#SBATCH --time=1:00
#SBATCH --output=srunjobdefaults-%j.out
# The job's options reach its sruns through the environment, as Slurm
# 22.05's srun reads its input variables: --gpus-per-node
# (SLURM_GPUS_PER_NODE) and -m (SLURM_DISTRIBUTION) are a bare srun's; an
# option of the srun's own wins. Each task says where it ran and how many
# GPUs it sees; scontrol show step says what the running step asked.
echo "job: dist=$SLURM_DISTRIBUTION gpus-per-node=$SLURM_GPUS_PER_NODE"
task='n=$(echo "$CUDA_VISIBLE_DEVICES" | tr , "\n" | grep -c .); echo "$0: rank $SLURM_PROCID node $SLURM_NODEID gpus $n dist $SLURM_DISTRIBUTION"'
srun sh -c "$task" bare | sort
srun --gpus-per-node=1 sh -c "$task" gpn1 | sort
srun -m block sh -c "$task" block | sort
# A running step's record, asked by the script while task 0 waits for it
# (a minute at most).
show() {
  name=$1; shift
  rm -f "up-$name-$SLURM_JOB_ID" "go-$name-$SLURM_JOB_ID"
  srun "$@" sh -c 'if [ "$SLURM_PROCID" = 0 ]; then echo "$SLURM_STEP_ID" > "up-$0.tmp" && mv "up-$0.tmp" "up-$0"; i=0; while [ ! -e "go-$0" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; fi' "$name-$SLURM_JOB_ID" &
  i=0; while [ ! -e "up-$name-$SLURM_JOB_ID" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  echo "step $name: $(scontrol show step "$SLURM_JOB_ID.$(cat "up-$name-$SLURM_JOB_ID")" 2>&1 | grep -o 'Dist=[^ ]*\|TresPer[A-Za-z]*=[^ ]*' | tr '\n' ' ')"
  touch "go-$name-$SLURM_JOB_ID"
  wait
  rm -f "up-$name-$SLURM_JOB_ID" "go-$name-$SLURM_JOB_ID"
}
show bare
show gpn1 --gpus-per-node=1 -m block
echo done
