#!/bin/sh
#SBATCH --job-name=srun-in
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=3:00
#SBATCH --output=srunin-%j.out
# srun forwards its stdin to the step's tasks on every node: all of them by
# default, one with --input=RANK, none with --input=none.
printf 'alpha\nbeta\n' | srun -l cat | sort
printf 'gamma\n' | srun -l --input=1 cat
printf 'delta\n' | srun -l --input=none sh -c 'cat; echo "empty $SLURM_PROCID"' | sort
echo "done"
