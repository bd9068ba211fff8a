#SBATCH --job-name=bad
echo "a batch script must start with #!"
