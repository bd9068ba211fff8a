package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/testkit/need"
)

func TestNormalizeFillsDefaults(t *testing.T) {
	t.Parallel()
	o, err := Options{Dir: "/tmp/x"}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if o.Nodes != 1 || o.CPUsPerNode != DefaultCPUsPerNode || o.GPUsPerNode != 0 ||
		o.Partition != DefaultPartition || o.ClusterName != DefaultClusterName ||
		o.SchedulerParameters != DefaultSchedulerParameters || o.NodeFormat != DefaultNodeFormat {
		t.Fatalf("defaults not filled: %+v", o)
	}
}

func TestNormalizeNamesEveryBadOption(t *testing.T) {
	t.Parallel()
	_, err := Options{Nodes: -1, CPUsPerNode: -2, GPUsPerNode: 65, ControllerPort: 70000, Partition: "Bad Name",
		ExtraConfig: []string{"no equals sign"}, RESTPort: 6820, NodeFormat: "gpu-%s",
		MorePartitions: []Partition{{Name: "Bad"}, {Name: "ok", MaxTimeMinutes: -1}, {Name: "short"}, {Name: "short", MaxTimeMinutes: 5}}}.normalize()
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{"Options.Dir", "Options.Nodes", "Options.CPUsPerNode", "Options.GPUsPerNode",
		"Options.ControllerPort", "Options.Partition", "Options.ExtraConfig[0]", "Options.RESTPort is set but Options.REST is not",
		"Options.NodeFormat", "Options.MorePartitions[0].Name", "Options.MorePartitions[1].MaxTimeMinutes",
		"Options.MorePartitions[3].Name \"short\" repeats Options.MorePartitions[2]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := (Options{Dir: "/tmp/with space"}).normalize(); err == nil || !strings.Contains(err.Error(), "Options.Dir") {
		t.Errorf("a Dir with a space: got %v, want an error naming Options.Dir", err)
	}
}

func TestRenderFollowsSlurmMD(t *testing.T) {
	t.Parallel()
	o, err := Options{Dir: "/base", Nodes: 2, CPUsPerNode: 16, GPUsPerNode: 8}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	conf, gres := Render(o, NewLayout("/base"), 6817, []int{17001, 17005})
	for _, want := range []string{
		"SlurmctldHost=localhost\n", "SlurmctldPort=6817\n", "SlurmUser=root\n",
		"ProctrackType=proctrack/linuxproc\n", "TaskPlugin=task/none\n", "SelectType=select/cons_tres\n",
		"SelectTypeParameters=CR_Core\n", "GresTypes=gpu\n", "MailProg=/bin/true\n", "MaxJobCount=100000\n",
		"MaxArraySize=1001\n", "SchedulerParameters=batch_sched_delay=0\n",
		"AuthInfo=socket=/base/munge/munge.socket.2\n", "SlurmdSpoolDir=/base/spool/%n\n",
		"SlurmdPidFile=/base/run/slurmd-%n.pid\n", "SlurmdLogFile=/base/log/slurmd-%n.log\n",
		"JobCompType=jobcomp/filetxt\n", "JobCompLoc=/base/jobcomp.txt\n",
		"NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001 CPUs=16 Gres=gpu:8\n",
		"NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17005 CPUs=16 Gres=gpu:8\n",
		"PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, conf)
		}
	}
	// Without slurmdbd this is fatal (SLURM.md).
	if strings.Contains(conf, "AccountingStorageTRES") {
		t.Error("slurm.conf sets AccountingStorageTRES without slurmdbd")
	}
	for _, n := range []string{"node1", "node2"} {
		if want := "NodeName=" + n + " Name=gpu File=/base/dev/nvidia[0-7]\n"; !strings.Contains(gres, want) {
			t.Errorf("gres.conf lacks %q:\n%s", want, gres)
		}
	}
	if strings.Contains(conf, "AuthAlt") {
		t.Error("slurm.conf sets JWT authentication without Options.REST")
	}
	o.REST = true
	if conf, _ := Render(o, NewLayout("/base"), 6817, []int{1, 2}); !strings.Contains(conf,
		"ReturnToService=2\nAuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=/base/jwt_hs256.key\n") {
		t.Errorf("REST: slurm.conf lacks the JWT lines:\n%s", conf)
	}
	o.REST = false
	o.GPUsPerNode = 1
	if _, gres := Render(o, NewLayout("/base"), 6817, []int{1, 2}); !strings.Contains(gres, "File=/base/dev/nvidia0\n") {
		t.Errorf("one GPU: gres.conf %q, want File=/base/dev/nvidia0", gres)
	}
	o.GPUsPerNode = 0
	conf, gres = Render(o, NewLayout("/base"), 6817, []int{1, 2})
	if strings.Contains(conf, "Gres=") || strings.Contains(gres, "NodeName") {
		t.Errorf("no GPUs but gres configured:\n%s\n%s", conf, gres)
	}
}

// TestScriptWritesTheSameConfig keeps scripts/slurm-local.sh and Render in
// step: the same settings give the same files, byte for byte.
func TestScriptWritesTheSameConfig(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install bash", "bash")
	script, err := filepath.Abs("../../scripts/slurm-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		env  []string
	}{
		{"gpus", Options{Nodes: 3, CPUsPerNode: 8, GPUsPerNode: 2, RealMemoryMB: 4096},
			[]string{"NODES=3", "CPUS=8", "GPUS=2", "MEM=4096"}},
		{"cpu-only", Options{Nodes: 1, CPUsPerNode: 64, Partition: "batch"},
			[]string{"NODES=1", "CPUS=64", "GPUS=0", "PARTITION=batch"}},
		{"rest", Options{Nodes: 2, CPUsPerNode: 4, REST: true},
			[]string{"NODES=2", "CPUS=4", "GPUS=0", "REST=1"}},
		{"names-and-partitions", Options{Nodes: 2, CPUsPerNode: 48, GPUsPerNode: 4, Partition: "batch", NodeFormat: "gpu-%04d",
			MorePartitions: []Partition{{Name: "short", MaxTimeMinutes: 1}, {Name: "long"}}},
			[]string{"NODES=2", "CPUS=48", "GPUS=4", "PARTITION=batch", "NODE_FORMAT=gpu-%04d", "MORE_PARTITIONS=short:1 long"}},
	} {
		dir := t.TempDir()
		cmd := exec.Command("bash", script, "conf", dir)
		cmd.Env = append(os.Environ(), append(tc.env, "CTL_PORT=6817", "NODE_PORT=17001")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: slurm-local.sh conf: %v\n%s", tc.name, err, out)
		}
		tc.o.Dir = dir
		o, err := tc.o.normalize()
		if err != nil {
			t.Fatal(err)
		}
		ports := make([]int, o.Nodes)
		for i := range ports {
			ports[i] = 17001 + i
		}
		wantConf, wantGres := Render(o, NewLayout(dir), 6817, ports)
		for file, want := range map[string]string{"slurm.conf": wantConf, "gres.conf": wantGres} {
			got, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("%s: the script's %s differs from Render's:\n--- script\n%s--- Render\n%s", tc.name, file, got, want)
			}
		}
		if o.GPUsPerNode > 0 {
			if target, err := os.Readlink(filepath.Join(dir, "dev", "nvidia1")); err != nil || target != "/dev/null" {
				t.Errorf("%s: dev/nvidia1 → %q (%v), want a symlink to /dev/null", tc.name, target, err)
			}
		}
	}
}

func TestScriptRefusesBadSettings(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install bash", "bash")
	cmd := exec.Command("bash", "../../scripts/slurm-local.sh", "conf", t.TempDir())
	cmd.Env = append(os.Environ(), "NODES=zero")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "NODES must be 1..256") {
		t.Fatalf("NODES=zero: err %v, output %q; want a failure naming NODES", err, out)
	}
	for _, bad := range []string{"NODE_FORMAT=gpu-%s", "MORE_PARTITIONS=short:0", "MORE_PARTITIONS=debug", "MORE_PARTITIONS=short short:5"} {
		cmd := exec.Command("bash", "../../scripts/slurm-local.sh", "conf", t.TempDir())
		cmd.Env = append(os.Environ(), bad)
		out, err := cmd.CombinedOutput()
		name, _, _ := strings.Cut(bad, "=")
		if err == nil || !strings.Contains(string(out), name) {
			t.Errorf("%s: err %v, output %q; want a failure naming %s", bad, err, out, name)
		}
	}
}

// TestScriptTakesMorePartitionsAsWritten: MORE_PARTITIONS is checked and
// used as written, never expanded as a file name pattern first. Split by
// the shell, "s*" in a directory holding a file "short" was checked as
// "short" and wrote a partition of a name nobody gave.
func TestScriptTakesMorePartitionsAsWritten(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install bash", "bash")
	script, err := filepath.Abs("../../scripts/slurm-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "short"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", script, "conf", dir)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "MORE_PARTITIONS=s*")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "MORE_PARTITIONS entry 's*'") {
		conf, _ := os.ReadFile(filepath.Join(dir, "slurm.conf"))
		t.Errorf("MORE_PARTITIONS=s*: err %v, output %q, slurm.conf partitions %q; want a failure naming the entry as given",
			err, out, grepLines(string(conf), "PartitionName="))
	}
	// Every word, whatever whitespace separates them: read one line, the
	// words after a newline were dropped without a word.
	dir = t.TempDir()
	cmd = exec.Command("bash", script, "conf", dir)
	cmd.Env = append(os.Environ(), "MORE_PARTITIONS=short:1\n\tlong:5 ")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("MORE_PARTITIONS over two lines: %v, %s", err, out)
	}
	conf, err := os.ReadFile(filepath.Join(dir, "slurm.conf"))
	if err != nil {
		t.Fatal(err)
	}
	got := grepLines(string(conf), "Default=NO")
	want := []string{"PartitionName=short Nodes=ALL Default=NO MaxTime=1 State=UP", "PartitionName=long Nodes=ALL Default=NO MaxTime=5 State=UP"}
	if !slices.Equal(got, want) {
		t.Errorf("MORE_PARTITIONS over two lines wrote %q, want %q", got, want)
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

func TestParseJobComp(t *testing.T) {
	t.Parallel()
	in := `JobId=2 UserId=root(0) GroupId=root(0) Name=my job JobState=COMPLETED Partition=debug TimeLimit=UNLIMITED NodeList=node1 NodeCnt=1 ReservationName= DerivedExitCode=0:0 ExitCode=0:0 

JobId=3 UserId=root(0) Name=wrap JobState=FAILED NodeList=node[1-2] ExitCode=1:0
`
	recs, err := ParseJobComp(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(recs), recs)
	}
	if r := recs[0]; r.JobID != "2" || r.Name != "my job" || r.State != "COMPLETED" || r.NodeList != "node1" ||
		r.ExitCode != "0:0" || r.Fields["ReservationName"] != "" || r.Fields["Partition"] != "debug" {
		t.Errorf("first record %+v", r)
	}
	if r := recs[1]; r.JobID != "3" || r.State != "FAILED" || r.NodeList != "node[1-2]" || r.ExitCode != "1:0" {
		t.Errorf("second record %+v", r)
	}
	if _, err := ParseJobComp(strings.NewReader("garbage line\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a line without JobId: got %v, want an error naming line 1", err)
	}
}
