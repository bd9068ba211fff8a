#!/bin/bash
#SBATCH --job-name=bashfunc
# greet is the submitter's exported bash function (export -f greet): sbatch carries it to the job, as Slurm does.
greet loom
