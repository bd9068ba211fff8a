package slurmcli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestHealthNodeStates: the states health gives nodes (drained for a
// fault, a reboot asked for and under way) print as Slurm 22.05 prints
// them (node_state_string and node_state_string_compact), with health's
// reason, who set it and when in sinfo -R and scontrol show node.
func TestHealthNodeStates(t *testing.T) {
	t.Parallel()
	f := fixture()
	at := timestamppb.New(time.Date(2026, 1, 2, 14, 4, 5, 0, time.UTC))
	xid := "Xid 79: GPU has fallen off the bus"
	for _, n := range f.SlurmNodes {
		switch n.GetHostname() {
		case "gpu-0001": // busy, a reboot asked for once its job ends
			n.State, n.Reason, n.ReasonUser, n.ReasonTime = loomv1.SlurmNode_REBOOT_REQUESTED, xid, "loom-health", at
			n.AllocGpus = 4
		case "gpu-0002":
			n.State, n.Reason, n.ReasonUser, n.ReasonTime = loomv1.SlurmNode_REBOOT_ISSUED, xid, "loom-health", at
			n.AllocGpus, n.AllocCpus = 0, 0
		case "gpu-0003":
			n.State, n.Reason, n.ReasonUser, n.ReasonTime = loomv1.SlurmNode_DRAINING, "ECC single-bit errors rising", "loom-health", at
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sinfo", "-N", "-p", "gpu"},
			"NODELIST   NODES PARTITION STATE \n" +
				"gpu-0001       1      gpu* mix@  \n" +
				"gpu-0002       1      gpu* boot^ \n" +
				"gpu-0003       1      gpu* drng  \n" +
				"gpu-0004       1      gpu* drain \n"},
		{[]string{"sinfo", "-R"},
			"REASON               USER      TIMESTAMP           NODELIST\n" +
				"Xid 79: GPU has fall loom-heal 2026-01-02T14:04:05 gpu-[0001-0002]\n" +
				"ECC single-bit error loom-heal 2026-01-02T14:04:05 gpu-0003\n" +
				"bad gpu              alice     2026-01-02T13:04:05 gpu-0004\n"},
		{[]string{"sinfo", "-h", "-N", "-o", "%N %T %E"},
			"gpu-0001 mixed@ Xid 79: GPU has fallen off the bus\n" +
				"gpu-0002 reboot^ Xid 79: GPU has fallen off the bus\n" +
				"gpu-0003 draining ECC single-bit errors rising\n" +
				"gpu-0003 draining ECC single-bit errors rising\n" +
				"gpu-0004 drained bad gpu\n"},
	} {
		code, out, errOut := run(t, f, tc.args[0], Env{}, tc.args[1:]...)
		if code != 0 || out != tc.want {
			t.Errorf("%v: %d\n%s%s\nwant\n%s", tc.args, code, out, errOut, tc.want)
		}
	}
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "node", "gpu-0002", "-o")
	if code != 0 || !strings.Contains(out, "State=DOWN+REBOOT_ISSUED ") || !strings.Contains(out, "Reason="+xid+" [loom-health@2026-01-02T14:04:05]") {
		t.Errorf("scontrol show node gpu-0002: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, f, "scontrol", Env{}, "show", "node", "gpu-0001", "-o")
	if code != 0 || !strings.Contains(out, "State=MIXED+REBOOT_REQUESTED ") {
		t.Errorf("scontrol show node gpu-0001: %d %q", code, out)
	}
	// sinfo -t takes the new states by name.
	code, out, _ = run(t, f, "sinfo", Env{}, "-h", "-N", "-t", "boot", "-o", "%N")
	if code != 0 || out != "gpu-0001\ngpu-0002\n" {
		t.Errorf("sinfo -t boot: %d %q", code, out)
	}
}

// TestNotRespondingNodes: a node health has lost touch with (unreachable,
// not judged failed) keeps the state its jobs give it, with Slurm's
// NOT_RESPONDING flag: "idle*" and "mix*" in sinfo (a row of their own),
// IDLE+NOT_RESPONDING and health's reason in scontrol show node, no line
// in sinfo -R, which lists the nodes taken out, and dead to sinfo -d/-r.
func TestNotRespondingNodes(t *testing.T) {
	t.Parallel()
	f := fixture()
	at := timestamppb.New(time.Date(2026, 1, 2, 14, 4, 5, 0, time.UTC))
	silent := "unreachable: no heartbeat for 45s"
	for _, n := range f.SlurmNodes {
		n.State, n.AllocGpus, n.AllocCpus = loomv1.SlurmNode_IDLE, 0, 0
		n.Reason, n.ReasonUser, n.ReasonTime = "", "", nil
		switch n.GetHostname() {
		case "gpu-0001":
			n.State, n.AllocGpus, n.AllocCpus = loomv1.SlurmNode_MIXED, 4, 4
			fallthrough
		case "gpu-0002":
			n.NotResponding, n.Reason, n.ReasonUser, n.ReasonTime = true, silent, "loom-health", at
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t %T"},
			"gpu-0001 mix* mixed*\ngpu-0002 idle* idle*\ngpu-0003 idle idle\ngpu-0004 idle idle\n"},
		{[]string{"sinfo", "-h", "-p", "gpu", "-o", "%t %D %N"},
			"mix* 1 gpu-0001\nidle* 1 gpu-0002\nidle 2 gpu-[0003-0004]\n"},
		{[]string{"sinfo", "-h", "-R"}, ""},
		// Not responding is dead to -d and -r, as in Slurm.
		{[]string{"sinfo", "-h", "-N", "-d", "-o", "%N"}, "gpu-0001\ngpu-0002\n"},
		{[]string{"sinfo", "-h", "-N", "-r", "-o", "%N"}, "gpu-0003\ngpu-0003\ngpu-0004\n"}, // gpu-0003 is in two partitions
	} {
		code, out, errOut := run(t, f, tc.args[0], Env{}, tc.args[1:]...)
		if code != 0 || out != tc.want {
			t.Errorf("%v: %d\n%s%s\nwant\n%s", tc.args, code, out, errOut, tc.want)
		}
	}
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "node", "gpu-0002", "-o")
	if code != 0 || !strings.Contains(out, "State=IDLE+NOT_RESPONDING ") || !strings.Contains(out, "Reason="+silent+" [loom-health@2026-01-02T14:04:05]") {
		t.Errorf("scontrol show node gpu-0002: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, f, "scontrol", Env{}, "show", "node", "gpu-0003", "-o")
	if code != 0 || !strings.Contains(out, "State=IDLE ") || strings.Contains(out, "Reason=") {
		t.Errorf("scontrol show node gpu-0003 (responding): %d %q", code, out)
	}
}
