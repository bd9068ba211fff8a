#!/bin/sh
#SBATCH --job-name=srun-plain-gpus
#SBATCH --time=1:00
#SBATCH --output=srunplaingpus-%j.out
#SBATCH --error=srunplaingpus-%j.err
# Submitted with a GPU option of the test's (--gres=gpu:2, --gpus=2,
# --gpus-per-task=1, --gpus-per-node=2), or run by salloc: a step without
# a GPU option of its own gets the job's GPUs and holds them, as Slurm
# 22.05's ("a job step is allocated all of the generic resources that have
# been allocated to the job"); --gres=none gets none. With the argument
# "one" the script stops after the first steps (a two-node --gpus=2 job
# has one GPU a node, so its one-task steps are refused).
#
# step NAME [OPTIONS]: a step whose tasks say how many GPUs they see; task
# 0 waits (a minute at most) while the script asks scontrol show step what
# the step holds.
task='n=$(echo "$CUDA_VISIBLE_DEVICES" | tr , "\n" | grep -c .); s=$(echo "$SLURM_STEP_GPUS" | tr , "\n" | grep -c .); echo "$0: task $SLURM_PROCID sees $n step-gpus $s"
if [ "$SLURM_PROCID" = 0 ]; then echo "$SLURM_STEP_ID" > "up-$1.tmp" && mv "up-$1.tmp" "up-$1"; i=0; while [ ! -e "go-$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; fi'
step() {
  name=$1; shift
  key=$name-$SLURM_JOB_ID
  rm -f "up-$key" "go-$key"
  srun "$@" sh -c "$task" "$name" "$key" >"out-$key" &
  i=0; while [ ! -e "up-$key" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  tres=$(scontrol show step "$SLURM_JOB_ID.$(cat "up-$key")" | grep -o 'TresPer[A-Za-z]*=[^ ]*' | grep gres | sed 's/=.*gres:/=gres:/' | tr '\n' ' ')
  touch "go-$key"
  wait
  sort "out-$key"
  echo "$name: tres $tres"
  rm -f "up-$key" "go-$key" "out-$key"
}
step plain
step none --gres=none
step gpus0 --gpus=0
[ "$1" = one ] && exit 0
# Two one-task steps at once: the first holds the job's GPUs until the
# second has been told to wait (this job's errors; 30 s at most, long
# only for a run where it never is), so the second runs after it.
d=plaingpus-$SLURM_JOB_ID
mkdir -p "$d"
srun --exact -n1 sh -c "echo up >$d/holder; i=0; until grep -q 'step creation temporarily disabled' srunplaingpus-$SLURM_JOB_ID.err || [ \$i -ge 300 ]; do sleep 0.1; i=\$((i+1)); done; touch $d/holder.end" &
i=0; while [ ! -s "$d/holder" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
srun --exact -n1 sh -c "[ -e $d/holder.end ] && echo 'second: after' || echo 'second: beside'" || echo "second: refused"
wait
# With --overlap neither holds nor waits.
srun --exact -n1 --overlap sh -c "echo up >$d/oholder; i=0; until [ -e $d/odone ] || [ \$i -ge 300 ]; do sleep 0.1; i=\$((i+1)); done" &
i=0; while [ ! -s "$d/oholder" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
srun --exact -n1 --overlap sh -c "echo 'overlap: beside'"
touch "$d/odone"
wait
echo done
