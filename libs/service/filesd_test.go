package service

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRegisterFileSD writes a registration as Prometheus' file_sd reads it,
// atomically (no temporary file left), advertises the host name for a
// wildcard address, sweeps files that dead processes of this host left,
// keeps other hosts' files, and unregisters only its own file.
func TestRegisterFileSD(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sd") // made by RegisterFileSD
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name")
	}

	unregister, err := RegisterFileSD(dir, "agent-projects/p/clusters/c-gpu-0001", "127.0.0.1:43211", map[string]string{"pool": "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent-projects_p_clusters_c-gpu-0001.json")
	g, err := readFileSD(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 1 || len(g[0].Targets) != 1 || g[0].Targets[0] != "127.0.0.1:43211" || g[0].Labels["pool"] != "gpu" ||
		g[0].Labels[FileSDPIDLabel] != strconv.Itoa(os.Getpid()) || g[0].Labels[FileSDHostLabel] != host {
		t.Fatalf("registration: %+v", g)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries, want the one file (no temporary left): %v", len(entries), entries)
	}

	// A wildcard listener is advertised by host name.
	unregWild, err := RegisterFileSD(dir, "agent-wild", "0.0.0.0:9176", nil)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := readFileSD(filepath.Join(dir, "agent-wild.json")); err != nil || g[0].Targets[0] != host+":9176" {
		t.Fatalf("wildcard registration: %+v %v, want %s:9176", g, err, host)
	}
	if _, err := RegisterFileSD(dir, "bad", "no-port", nil); err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Errorf("address without a port: %v", err)
	}

	// A file of a process that has exited is swept at the next
	// registration; another host's is kept.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "agent-stale.json")
	other := filepath.Join(dir, "agent-other.json")
	write := func(path, pid, h string) {
		t.Helper()
		body := `[{"targets":["127.0.0.1:1"],"labels":{"` + FileSDPIDLabel + `":"` + pid + `","` + FileSDHostLabel + `":"` + h + `"}}]`
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(stale, strconv.Itoa(dead.Process.Pid), host)
	write(other, strconv.Itoa(dead.Process.Pid), host+"-elsewhere")
	unregNew, err := RegisterFileSD(dir, "agent-new", "127.0.0.1:2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead process' file is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another host's file was removed: %v", err)
	}

	// Unregistering removes the file, but not one that another process
	// wrote over it since.
	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("unregistered file still there: %v", err)
	}
	write(filepath.Join(dir, "agent-wild.json"), "1", host)
	if err := unregWild(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "agent-wild.json")); err != nil {
		t.Errorf("a file another process replaced was removed: %v", err)
	}
	if err := unregNew(); err != nil {
		t.Fatal(err)
	}
	if err := unregNew(); err != nil {
		t.Errorf("second unregister: %v", err)
	}
}
