#!/bin/sh
#SBATCH --job-name=dep-ok
#SBATCH --time=2:00
#SBATCH --output=dep-ok-%j.out
# Succeeds once the test releases it (dep-ok.release in its directory), or
# 90 s on: the jobs that depend on it wait for it meanwhile. The test looks
# at them after ten submissions, which a loaded machine can stretch past a
# short bound; this one only ends a run whose test stopped before releasing.
i=0
while [ ! -e dep-ok.release ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done
echo ok
