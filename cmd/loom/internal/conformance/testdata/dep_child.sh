#!/bin/sh
#SBATCH --job-name=dep-child
#SBATCH --time=0:30
#SBATCH --output=dep-child-%j.out
# Submitted with --dependency on the command line (which the directives
# above do not set): it just records that it ran.
echo "child $SLURM_JOB_ID ran"
