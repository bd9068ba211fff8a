#!/bin/sh
#SBATCH --job-name=dep-ok
#SBATCH --time=0:30
#SBATCH --output=dep-ok-%j.out
# Succeeds once the test releases it (dep-ok.release in its directory), or
# 20 s on: the jobs that depend on it wait for it meanwhile.
i=0
while [ ! -e dep-ok.release ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
echo ok
