#!/bin/sh
#SBATCH --job-name=srun-wait
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --time=1:00
#SBATCH --output=srunwait-%j.out
#SBATCH --error=srunwait-%j.err
# Step resources in a two-CPU job, as Slurm 22.05 has them.
d=wait-$SLURM_JOB_ID
mkdir -p "$d"
# pair A B OPTIONS: a step (srun OPTIONS) that says "A together" when the
# step of "pair B A" runs beside it, "A alone" when it did not within 30 s
# (long only for a loaded machine: a step that runs beside ends at once).
pair() {
  a=$1 b=$2; shift 2
  srun "$@" sh -c "touch $d/$a; i=0; while [ ! -e $d/$b ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i+1)); done; [ -e $d/$b ] && echo $a together || echo $a alone" >"$d/out-$a"
}
# holder NAME OPTIONS: a step that runs until the next step has asked and
# been told to wait (srun's "step creation temporarily disabled" in this
# job's errors; 30 s at most, long only for a run where it never is), and
# a wait until it runs. A fixed time would let a loaded machine end it
# before the next step asks: that step would then never be told to wait.
holder() {
  n=$1; shift
  srun "$@" sh -c "touch $d/$n; i=0; until grep -q 'step creation temporarily disabled' srunwait-$SLURM_JOB_ID.err || [ \$i -ge 300 ]; do sleep 0.1; i=\$((i+1)); done; touch $d/$n.end" &
  while [ ! -e "$d/$n" ]; do sleep 0.1; done
}
# Without --exact a step holds every CPU of the job: the next waits.
holder plain -n1
srun -n1 sh -c "[ -e $d/plain.end ] && echo plain: the second step ran after the first || echo plain: the second step ran beside the first"
wait
# --exact, and -c (which implies it), hold one CPU a task: two at once.
pair exact1 exact2 --exact -n1 & pair exact2 exact1 --exact -n1
wait
pair c1 c2 -n1 -c1 & pair c2 c1 -n1 -c1
wait
cat "$d/out-exact1" "$d/out-exact2" "$d/out-c1" "$d/out-c2"
# --overlap waits for nothing: the step holding every CPU waits (30 s at
# most) for the --overlap one to have run. The --overlap step looks for
# whole.end before it says it ran: looked for after, a loaded machine
# could let the whole step see "over" and end in between.
srun -n1 sh -c "touch $d/whole; i=0; while [ ! -e $d/over ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i+1)); done; touch $d/whole.end" &
while [ ! -e "$d/whole" ]; do sleep 0.1; done
srun --overlap -n1 sh -c "[ -e $d/whole.end ] && r=waited || r='ran beside'; touch $d/over; echo overlap: \$r"
wait
# More CPUs than the job has: refused at once.
srun --exact -n1 -c4 true || echo "too many CPUs: refused"
