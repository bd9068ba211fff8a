package slurmspec

import "errors"

// The values of --open-mode (Job.open_mode).
const (
	// OpenModeTruncate empties the output and error files at each start of
	// a job, a requeued run's too: Slurm's default (JobFileAppend=0), also
	// what an empty open_mode means.
	OpenModeTruncate = "truncate"
	// OpenModeAppend keeps what earlier runs wrote.
	OpenModeAppend = "append"
)

// ParseOpenMode returns the open mode a --open-mode value names: "append"
// or "truncate", or a prefix of one, as Slurm accepts ("a", "t").
func ParseOpenMode(s string) (string, error) {
	for _, m := range []string{OpenModeAppend, OpenModeTruncate} {
		if s != "" && len(s) <= len(m) && m[:len(s)] == s {
			return m, nil
		}
	}
	return "", errors.New("want append or truncate")
}
