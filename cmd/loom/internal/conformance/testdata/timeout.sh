#!/bin/sh
#SBATCH --job-name=timeout
#SBATCH --time=5:00
#SBATCH --signal=B:USR1@2
#SBATCH --output=timeout-%j.out
# Runs past its time limit, which TestTimeLimit lowers once "start" shows
# the trap is set. --signal=B:USR1@2 sends USR1 to this shell 2 seconds
# before the limit; the trap records it.
trap 'echo "got USR1"' USR1
echo start
while :; do
  sleep 1 &
  wait $!
done
