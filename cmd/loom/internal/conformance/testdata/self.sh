#!/bin/sh
#SBATCH --job-name=self
#SBATCH --time=5:00
#SBATCH --output=self-%j.out
#SBATCH --error=self-%j.err
# What a job script asks of Slurm about itself: its record, its place in
# the queue, the partitions; then it cancels itself. Loom shows CONFIGURING
# until the agent's report that this script started reaches the scheduler
# (docs/slurm.md, "Job states": Slurm shows RUNNING already), which a
# loaded machine can make later than the script's first command: wait for
# it (30 s at most). The limit (5 min) only bounds a broken scancel.
i=0
until scontrol show job "$SLURM_JOB_ID" | grep -q "JobState=RUNNING" || [ $i -ge 150 ]; do sleep 0.2; i=$((i+1)); done
scontrol show job "$SLURM_JOB_ID" | grep -o "JobState=RUNNING"
squeue -h -j "$SLURM_JOB_ID" -o "%i %T"
echo "squeue lists $(squeue -h | wc -l) job(s)"
sinfo -h -o "%P" | head -1 >/dev/null && echo "sinfo ok"
scontrol update JobId="$SLURM_JOB_ID" JobName=renamed && echo "update ok"
scancel "$SLURM_JOB_ID"
sleep 60
echo "still running after scancel"
