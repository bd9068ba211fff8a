package recipes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubs are the programs the rendered scripts call, standing in for
// Slurm and the frameworks: scontrol names a two-node allocation, srun
// drops its options and runs the command, and each framework program
// prints the environment it got and then its arguments, one per line.
var stubs = map[string]string{
	"scontrol": `[ "$1 $2" = "show hostnames" ] && printf 'gpu-0001\ngpu-0002\n'`,
	"srun":     `while [ $# -gt 0 ]; do case "$1" in --*=*) shift ;; *) break ;; esac; done; exec "$@"`,
	"torchrun": report, "nemo": report, "python3": report,
}

const report = `echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT NODE_RANK=${NODE_RANK:-} OUTPUT_DIR=$OUTPUT_DIR LOOM_RECIPE=$LOOM_RECIPE"
for a in "$@"; do echo "$a"; done`

func stubDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRenderedScriptsRun runs every batch script and CustomJob launcher
// with bash, Slurm and the frameworks stubbed: the distributed environment
// comes out right (MASTER_ADDR the allocation's first host, or the
// replica's), and the framework gets exactly the rendered arguments, each
// one word however it is quoted, with the variables expanded.
func TestRenderedScriptsRun(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	dir := stubDir(t)
	path := dir + ":/usr/bin:/bin"
	for _, r := range List() {
		for _, o := range []Options{{}, {FromCheckpoint: "gs://b/ck/step-9"}} {
			script, err := Sbatch(r, o)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bash, "-c", script)
			cmd.Env = []string{"PATH=" + path, "SLURM_JOB_NODELIST=gpu-[0001-0002]", "SLURM_NNODES=2", "SLURM_JOB_ID=7",
				"LOOM_CHECKPOINT_DIR=/ck", "PWD=/work"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: the script fails: %v\n%s", r.Name, err, out)
			}
			want := []string{"MASTER_ADDR=gpu-0001 MASTER_PORT=29500 NODE_RANK= OUTPUT_DIR=/ck LOOM_RECIPE=" + r.Name + "@1"}
			argv := launcher(r, o, slurmMode)
			for len(argv) > 0 && (argv[0] == "srun" || strings.HasPrefix(argv[0], "--")) {
				argv = argv[1:]
			}
			vars := strings.NewReplacer("$MASTER_ADDR", "gpu-0001", "$MASTER_PORT", "29500", "$SLURM_NNODES", "2",
				"$SLURM_JOB_ID", "7", "$OUTPUT_DIR", "/ck")
			for _, a := range argv[1:] {
				want = append(want, vars.Replace(a))
			}
			if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s %+v: the framework got\n%s\nwant\n%s", r.Name, o, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}

		job, err := CustomJob(r, Options{}, CustomJobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := job.GetJobSpec().GetWorkerPoolSpecs()[0].GetContainerSpec().GetCommand()
		cmd := exec.Command(bash, "-c", c[2])
		cmd.Env = []string{"PATH=" + path, "MASTER_ADDR=host-0", "MASTER_PORT=29507", "WORLD_SIZE=2", "RANK=1",
			"CLOUD_ML_JOB_ID=9", "AIP_CHECKPOINT_DIR=/aip"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: the CustomJob launcher fails: %v\n%s", r.Name, err, out)
		}
		rank := ""
		if r.Framework == MaxText {
			rank = "1"
		}
		want := []string{"MASTER_ADDR=host-0 MASTER_PORT=29507 NODE_RANK=" + rank + " OUTPUT_DIR=/aip LOOM_RECIPE=" + r.Name + "@1"}
		vars := strings.NewReplacer("$MASTER_ADDR", "host-0", "$MASTER_PORT", "29507", "$WORLD_SIZE", "2",
			"$CLOUD_ML_JOB_ID", "9", "$OUTPUT_DIR", "/aip", "$(command -v nemo)", filepath.Join(dir, "nemo"))
		for _, a := range launcher(r, Options{}, vertexMode)[1:] {
			want = append(want, vars.Replace(a))
		}
		if got := strings.TrimSuffix(string(out), "\n"); got != strings.Join(want, "\n") {
			t.Errorf("%s: the CustomJob's framework got\n%s\nwant\n%s", r.Name, got, strings.Join(want, "\n"))
		}
	}
}
