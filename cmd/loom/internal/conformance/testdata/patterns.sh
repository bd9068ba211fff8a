#!/bin/sh
#SBATCH --job-name=patt
#SBATCH --output=out-%x-%j-%u.txt
#SBATCH --error=logs/%j-%N.err
# Standard output and error go to the files their patterns name.
echo to-stdout
echo to-stderr >&2
