#!/bin/sh
#SBATCH --job-name=dep-fail
#SBATCH --time=0:30
#SBATCH --output=dep-fail-%j.out
# Fails with exit code 3.
sleep 1
echo failing
exit 3
