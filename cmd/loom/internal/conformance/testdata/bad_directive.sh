#!/bin/sh
#SBATCH --job-name=bad
#SBATCH --no-such-option=1
echo "never runs"
