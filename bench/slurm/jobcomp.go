package slurm

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// JobRecord is one finished job from the jobcomp/filetxt file (what
// `sacct -c` reads).
type JobRecord struct {
	// JobID, Name, State ("COMPLETED", "FAILED", "CANCELLED", …), NodeList
	// and ExitCode ("0:0": exit status and signal) as Slurm wrote them.
	JobID, Name, State, NodeList, ExitCode string
	// Fields holds every Key=Value of the line.
	Fields map[string]string
}

// ParseJobComp parses jobcomp/filetxt lines ("JobId=2 UserId=root(0) …
// JobState=COMPLETED … ExitCode=0:0"). Blank lines are skipped; a line
// without JobId= is an error naming its line number.
func ParseJobComp(r io.Reader) ([]JobRecord, error) {
	var out []JobRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := parseFields(line)
		if f["JobId"] == "" {
			return out, fmt.Errorf("jobcomp line %d: no JobId in %q", n, truncate(line, 80))
		}
		out = append(out, JobRecord{JobID: f["JobId"], Name: f["Name"], State: f["JobState"],
			NodeList: f["NodeList"], ExitCode: f["ExitCode"], Fields: f})
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read jobcomp: %w", err)
	}
	return out, nil
}

// parseFields splits "K=V K2=V2" on spaces; a word without '=' belongs to
// the previous value (a job name with spaces).
func parseFields(line string) map[string]string {
	f := map[string]string{}
	last := ""
	for _, word := range strings.Split(line, " ") {
		k, v, ok := strings.Cut(word, "=")
		if !ok || k == "" {
			if last != "" {
				f[last] += " " + word
			}
			continue
		}
		f[k], last = v, k
	}
	return f
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
