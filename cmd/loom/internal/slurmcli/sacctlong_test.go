package slurmcli

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// slurmLongHeader is Slurm 22.05's `sacct -l` header: LONG_FIELDS
// (src/sacct/sacct.h) in order, each with its width in sacct.c's fields[]
// (negative: left-justified).
const slurmLongHeader = "JobID:-12 JobIDRaw:-12 JobName:10 Partition:10 MaxVMSize:10 MaxVMSizeNode:14 MaxVMSizeTask:14 AveVMSize:10 " +
	"MaxRSS:10 MaxRSSNode:10 MaxRSSTask:10 AveRSS:10 MaxPages:8 MaxPagesNode:12 MaxPagesTask:14 AvePages:10 MinCPU:10 " +
	"MinCPUNode:10 MinCPUTask:10 AveCPU:10 NTasks:8 AllocCPUS:10 Elapsed:10 State:10 ExitCode:8 AveCPUFreq:10 " +
	"ReqCPUFreqMin:13 ReqCPUFreqMax:13 ReqCPUFreqGov:13 ReqMem:10 ConsumedEnergy:14 MaxDiskRead:12 MaxDiskReadNode:15 " +
	"MaxDiskReadTask:15 AveDiskRead:14 MaxDiskWrite:12 MaxDiskWriteNode:16 MaxDiskWriteTask:16 AveDiskWrite:14 " +
	"ReqTRES:10 AllocTRES:10 TRESUsageInAve:14 TRESUsageInMax:14 TRESUsageInMaxNode:18 TRESUsageInMaxTask:18 " +
	"TRESUsageInMin:14 TRESUsageInMinNode:18 TRESUsageInMinTask:18 TRESUsageInTot:14 TRESUsageOutMax:15 " +
	"TRESUsageOutMaxNode:19 TRESUsageOutMaxTask:19 TRESUsageOutAve:15 TRESUsageOutTot:15"

// TestSacctLongIsSlurms: -l prints Slurm 22.05's LONG_FIELDS, in its
// order and widths.
func TestSacctLongIsSlurms(t *testing.T) {
	t.Parallel()
	var want strings.Builder
	for _, f := range strings.Fields(slurmLongHeader) {
		name, w, _ := strings.Cut(f, ":")
		width, _ := strconv.Atoi(w)
		fmt.Fprintf(&want, "%*s ", width, name)
	}
	code, out, errOut := run(t, fixture(), "sacct", Env{}, "-l", "-j", "12")
	if header, _, _ := strings.Cut(out, "\n"); code != 0 || header != want.String() {
		t.Errorf("sacct -l: %d %q\n got: %q\nwant: %q", code, errOut, header, want.String())
	}
}

// TestSacctFieldOptionsAdd: as Slurm 22.05's sacct (options.c, measured
// with sacct -c beside Loom), -o adds to the fields of an earlier -o, -b's
// and -l's fields come after -o's, -b and -l both print both lists, and -l
// with -o is refused; SACCT_FORMAT is only the default.
func TestSacctFieldOptionsAdd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-o", "jobid", "-o", "state"}, nil, "JobID|State\n"},
		{[]string{"-b", "-o", "jobname"}, nil, "JobName|JobID|State|ExitCode\n"},
		{[]string{"-o", "jobid,state", "-b"}, nil, "JobID|State|JobID|State|ExitCode\n"},
		{[]string{"-b"}, map[string]string{"SACCT_FORMAT": "JobName"}, "JobID|State|ExitCode\n"},
		{[]string{"-o", "State"}, map[string]string{"SACCT_FORMAT": "JobName"}, "State\n"},
		{nil, map[string]string{"SACCT_FORMAT": "JobName"}, "JobName\n"},
	} {
		args := append([]string{"-P", "-X", "-j", "12"}, tc.args...)
		code, out, errOut := run(t, fixture(), "sacct", Env{Environ: tc.env}, args...)
		if header, _, _ := strings.Cut(out, "\n"); code != 0 || header+"\n" != tc.want {
			t.Errorf("sacct %v (%v): %d %q %q, want header %q", args, tc.env, code, out, errOut, tc.want)
		}
	}
	code, out, errOut := run(t, fixture(), "sacct", Env{}, "-P", "-b", "-l", "-X", "-j", "12")
	if header, _, _ := strings.Cut(out, "\n"); code != 0 || !strings.HasPrefix(header, "JobID|State|ExitCode|JobID|JobIDRaw|JobName|") {
		t.Errorf("sacct -b -l: %d %q %q, want -b's fields then -l's", code, out, errOut)
	}
	for _, args := range [][]string{{"-l", "-o", "JobID"}, {"--format=JobID", "--long"}} {
		code, out, errOut := run(t, fixture(), "sacct", Env{}, args...)
		want := "sacct: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.\n"
		if code != 1 || out != "" || errOut != want {
			t.Errorf("sacct %v: %d %q %q, want 1 and %q", args, code, out, errOut, want)
		}
	}
}
