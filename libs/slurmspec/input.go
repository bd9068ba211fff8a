package slurmspec

import (
	"fmt"
	"strconv"
)

// A step's input (srun -i/--input, CreateJobStepRequest.input): which of
// its tasks read what srun forwards from its stdin.
const (
	// InputNone gives every task /dev/null, as a step created without
	// input is.
	InputNone = ""
	// InputAll gives every task the input, Slurm's default.
	InputAll = "all"
)

// Input files in a step's output directory: srun appends its stdin to
// InputFile and makes InputEOF when that ends; a task reads InputFile as
// it grows until InputEOF exists and it has read it all.
const (
	InputFile = "stdin"
	InputEOF  = "stdin.eof"
	// WinsizeFile holds the new size of srun --pty's terminal, "ROWS
	// COLS", replaced (written beside it, then renamed) at each resize.
	WinsizeFile = "winsize"
)

// MaxTermSize bounds a step's terminal's rows and columns (srun --pty).
const MaxTermSize = 10000

// MaxInputBytes bounds what srun forwards to one step: the input is kept in
// a file on the shared filesystem, which no task consuming it shrinks.
const MaxInputBytes = 1 << 30

// ParseInput checks a step's input against its task count (0: not known
// yet, any rank below MaxStepTasks): InputNone, InputAll, or a task's rank
// in decimal.
func ParseInput(s string, ntasks int) error {
	if s == InputNone || s == InputAll {
		return nil
	}
	limit := ntasks
	if limit <= 0 {
		limit = MaxStepTasks
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return fmt.Errorf("%q: want all, a task's rank, or nothing for none", clipValue(s))
	}
	if n >= limit {
		return fmt.Errorf("task %d is not a task of the step (0..%d)", n, limit-1)
	}
	return nil
}

// TakesInput reports whether the task of global rank rank reads a step's
// input (a valid input, ParseInput).
func TakesInput(input string, rank int32) bool {
	return input == InputAll || (input != InputNone && input == strconv.Itoa(int(rank)))
}

// clipValue shortens a caller's value for an error message.
func clipValue(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
