package slurmcli

import (
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// The parsers take user input: whatever it is, they answer without
// panicking (the seeds run as unit tests; `go test -fuzz` explores).

func FuzzParseSbatch(f *testing.F) {
	f.Add("-N2 --gres=gpu:8 -t 1:00:00 job.sh", "#!/bin/sh\n#SBATCH --array=0-3%2 -d afterok:1\ntrue\n")
	f.Add("--begin=now+1hour --signal=B:USR1@90 --export=ALL,A=b job.sh x", "#!/bin/bash\n#SBATCH -J 'a b' # c\necho\n")
	f.Add("--wrap=hostname --mem=4G", "")
	f.Fuzz(func(t *testing.T, args, script string) {
		job, err := ParseSbatch(strings.Fields(args), []byte(script), map[string]string{"PWD": "/w", "USER": "u"})
		if err == nil && job == nil {
			t.Fatal("no job and no error")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("an error without a message")
		}
	})
}

func FuzzSpecs(f *testing.F) {
	for _, s := range []string{"0-15:2%4", "afterok:12:13_2,singleton", "now+5days", "16:00", "1-02:03:04", "B:USR1@60", "%.18i %-9P|%R", "JobID:.10,Name"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := ParseArray(s); err == nil && a.Count() == 0 {
			t.Fatalf("array %q has no tasks", s)
		}
		_, _ = slurmspec.ParseDependency(s)
		_, _ = ParseBegin(s, testNow)
		if secs, _, err := ParseTimeLimit(s); err == nil && secs < 0 {
			t.Fatalf("negative time limit for %q", s)
		}
		_, _ = slurmspec.ParseSignal(s)
		f := parseFormat(s)
		var b strings.Builder
		f.render(&b, func(string) (cell, bool) { return cell{text: s, cut: true}, true })
		_, _ = parseLongFormat(s, squeueLongNames)
		_, _ = parseJobSelector("x", s)
		_, _ = parseSacctFormat(s, sacctFields(testNow, testNow.Location(), func(*loomv1.Job) int64 { return -1 }, defaultUnits))
	})
}
