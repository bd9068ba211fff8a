#!/bin/sh
#SBATCH --job-name=mn-gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --time=0:30
#SBATCH --output=mn-%j.out
# The batch script runs once, on the first node of the allocation, with
# the job's Slurm environment; srun -N1 runs two tasks on that node.
for v in SLURM_JOB_ID SLURM_JOB_NAME SLURM_JOB_NODELIST SLURM_NNODES SLURM_JOB_NUM_NODES SLURM_NTASKS \
         SLURM_PROCID SLURM_NODEID SLURM_LOCALID SLURM_GPUS_ON_NODE CUDA_VISIBLE_DEVICES \
         SLURM_JOB_PARTITION SLURM_SUBMIT_DIR SLURMD_NODENAME MASTER_ADDR MASTER_PORT; do
  eval "echo \"env $v=\${$v-<unset>}\""
done
echo "cwd=$(pwd)"
srun -N1 -n2 -l sh -c 'echo "step procid=$SLURM_PROCID localid=$SLURM_LOCALID ntasks=$SLURM_NTASKS"'
echo "srun exit=$?"
