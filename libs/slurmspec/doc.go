// Package slurmspec parses the option values Slurm users write, as Slurm
// itself accepts them: --array specs ("0-15:2%4", task ids below MaxArraySize), --dependency specs
// ("afterok:12:13_2,singleton"), time limits ("1-02:00:00", "UNLIMITED") and
// signals ("USR1", "B:USR1@90"). The gateway validates submissions with it,
// and the Slurm-compatible commands parse their options with the same rules.
// It is pure: no I/O, no clock.
package slurmspec
