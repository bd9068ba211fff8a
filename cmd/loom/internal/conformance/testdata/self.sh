#!/bin/sh
#SBATCH --job-name=self
#SBATCH --time=0:30
#SBATCH --output=self-%j.out
#SBATCH --error=self-%j.err
# What a job script asks of Slurm about itself: its record, its place in
# the queue, the partitions; then it cancels itself.
scontrol show job "$SLURM_JOB_ID" | grep -o "JobState=RUNNING"
squeue -h -j "$SLURM_JOB_ID" -o "%i %T"
echo "squeue lists $(squeue -h | wc -l) job(s)"
sinfo -h -o "%P" | head -1 >/dev/null && echo "sinfo ok"
scontrol update JobId="$SLURM_JOB_ID" JobName=renamed && echo "update ok"
scancel "$SLURM_JOB_ID"
sleep 60
echo "still running after scancel"
