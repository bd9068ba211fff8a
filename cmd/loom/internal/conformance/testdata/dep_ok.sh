#!/bin/sh
#SBATCH --job-name=dep-ok
#SBATCH --time=0:30
#SBATCH --output=dep-ok-%j.out
# Succeeds after a while: the jobs that depend on it wait for it.
sleep 3
echo ok
