#!/bin/sh
#SBATCH --job-name=held
#SBATCH --hold
#SBATCH --output=held-%j.out
# Submitted held: runs only after scontrol release.
echo "released and ran"
