package slurmspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// signalNames are the Linux signal names by number, as Slurm accepts them.
var signalNames = map[int]string{
	1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 5: "TRAP", 6: "ABRT", 7: "BUS", 8: "FPE",
	9: "KILL", 10: "USR1", 11: "SEGV", 12: "USR2", 13: "PIPE", 14: "ALRM", 15: "TERM",
	16: "STKFLT", 17: "CHLD", 18: "CONT", 19: "STOP", 20: "TSTP", 21: "TTIN", 22: "TTOU",
	23: "URG", 24: "XCPU", 25: "XFSZ", 26: "VTALRM", 27: "PROF", 28: "WINCH", 29: "IO",
	30: "PWR", 31: "SYS",
}

// ParseSignalName accepts a signal as a name ("USR1", "SIGUSR1", any
// case) or a number ("10") and returns its name without the SIG prefix.
func ParseSignalName(s string) (string, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if u == "" {
		return "", errors.New("empty signal")
	}
	if isDigits(u) {
		n, _ := strconv.Atoi(u)
		if name, ok := signalNames[n]; ok {
			return name, nil
		}
		return "", fmt.Errorf("signal number %s is not one of 1-31", s)
	}
	u = strings.TrimPrefix(u, "SIG")
	for _, name := range signalNames {
		if name == u {
			return name, nil
		}
	}
	return "", fmt.Errorf("%q is not a signal name", s)
}

// SignalNumber is the Linux number of a signal name as ParseSignalName
// returns it ("USR1": 10); false for a name it does not know.
func SignalNumber(name string) (int, bool) {
	for n, s := range signalNames {
		if s == name {
			return n, true
		}
	}
	return 0, false
}

// Signal is a parsed --signal spec.
type Signal struct {
	// Batch (B:) signals only the batch shell; Reservation (R:) signals
	// at the end of a reservation rather than the time limit.
	Batch, Reservation bool
	Name               string
	// Seconds is how long before the time limit the signal is sent
	// (Slurm's default is 60).
	Seconds int
}

// String returns the normalised spec, e.g. "B:USR1@90".
func (s *Signal) String() string {
	var b strings.Builder
	if s.Reservation {
		b.WriteString("R")
	}
	if s.Batch {
		b.WriteString("B")
	}
	if b.Len() > 0 {
		b.WriteString(":")
	}
	fmt.Fprintf(&b, "%s@%d", s.Name, s.Seconds)
	return b.String()
}

// ParseSignal parses --signal=[{R|B}:]SIG[@TIME] as sbatch does: SIG a
// name or number, TIME seconds 0..65535 (default 60).
func ParseSignal(spec string) (*Signal, error) {
	s := strings.TrimSpace(spec)
	out := &Signal{Seconds: 60}
	if flags, rest, ok := strings.Cut(s, ":"); ok {
		for _, c := range strings.ToUpper(flags) {
			switch c {
			case 'B':
				out.Batch = true
			case 'R':
				out.Reservation = true
			default:
				return nil, fmt.Errorf("unknown flag %q before ':' (B or R)", string(c))
			}
		}
		s = rest
	}
	sig, at, hasAt := strings.Cut(s, "@")
	name, err := ParseSignalName(sig)
	if err != nil {
		return nil, err
	}
	out.Name = name
	if hasAt {
		n, err := strconv.Atoi(at)
		if err != nil || !isDigits(at) || n > 65535 {
			return nil, fmt.Errorf("time %q after @ is not 0-65535 seconds", at)
		}
		out.Seconds = n
	}
	return out, nil
}
