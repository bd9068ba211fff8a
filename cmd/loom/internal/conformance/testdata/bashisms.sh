#!/bin/bash
#SBATCH --job-name=bashisms
# /bin/sh here is dash, which refuses arrays and [[ ]]: this runs only under bash, as in Slurm.
set -euo pipefail
words=(zero "$@")
[[ ${#words[@]} -eq 3 ]] && echo "${words[2]} of ${#words[@]}"
