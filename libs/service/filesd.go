package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/proc"
)

// File-based service discovery (Prometheus' file_sd_configs): a process
// whose /metrics port nobody chose (a node agent listens on 127.0.0.1:0)
// writes one JSON file naming its address into a directory that Prometheus
// watches, and removes it when it stops. Prometheus re-reads the files when
// they change, so the targets follow the processes as they start and stop.
const (
	// FileSDPIDLabel and FileSDHostLabel record the writer's process id and
	// host name in its file. Prometheus drops labels that start with "__"
	// after relabeling, so they never reach a series; RegisterFileSD reads
	// them to remove files whose process died without removing its own.
	FileSDPIDLabel  = "__meta_loom_pid"
	FileSDHostLabel = "__meta_loom_host"
	// MaxFileSDFiles bounds the files a sweep of stale ones reads; a
	// directory with more is swept up to this many.
	MaxFileSDFiles = 10000
	// maxFileSDBytes bounds one file read by the sweep; the files written
	// here are a few hundred bytes.
	maxFileSDBytes = 64 << 10
)

// FileSDGroup is one target group of a file_sd JSON file, as Prometheus
// reads it: addresses to scrape, and labels for their series.
type FileSDGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// AgentName is the service name of the agent of node host in cluster
// clusterID (the cluster's last name segment): "agent-<cluster>-<host>".
// Its Redis prefix is that and ":", its consumer group "loom-" and that,
// and the Redis ACL user the provisioner makes for it that name too.
func AgentName(clusterID, host string) string {
	return "agent-" + clusterID + "-" + host
}

// FileSDName is the file that service name registers in: name with every
// byte outside [A-Za-z0-9._-] replaced by '_', then ".json". Agents are
// named "agent-<cluster>-<host>", so a scrape job reads "agent-*.json".
func FileSDName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b) + ".json"
}

// RegisterFileSD writes dir/FileSDName(name) naming addr (the bound
// host:port of /metrics; an unspecified host, 0.0.0.0 or ::, is advertised
// as this machine's host name) with labels, atomically (a temporary file
// renamed over it, so Prometheus never reads half a file), after removing
// files in dir that a process of this host that no longer runs left behind.
// dir is made if missing. The returned function removes the file, unless
// another process (the same node's agent, started again) has replaced it
// since.
func RegisterFileSD(dir, name, addr string, labels map[string]string) (unregister func() error, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("file_sd: address %q: %w", addr, err)
	}
	hostname, _ := os.Hostname()
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if hostname == "" {
			return nil, fmt.Errorf("file_sd: %s listens on every interface and this machine has no host name to advertise", addr)
		}
		host = hostname
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("file_sd: %w", err)
	}
	SweepFileSD(dir)
	pid := strconv.Itoa(os.Getpid())
	l := map[string]string{FileSDPIDLabel: pid, FileSDHostLabel: hostname}
	for k, v := range labels {
		l[k] = v
	}
	b, err := json.MarshalIndent([]FileSDGroup{{Targets: []string{net.JoinHostPort(host, port)}, Labels: l}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("file_sd: %w", err)
	}
	path := filepath.Join(dir, FileSDName(name))
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return nil, fmt.Errorf("file_sd: %w", err)
	}
	return func() error {
		g, err := readFileSD(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && (len(g) != 1 || g[0].Labels[FileSDPIDLabel] != pid || g[0].Labels[FileSDHostLabel] != hostname) {
			return nil // another process registered under the name since
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file_sd: %w", err)
		}
		return nil
	}, nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory (a dot file that no "*.json" pattern matches) and a rename.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(0o644)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
	}
	return werr
}

// readFileSD reads one file_sd JSON file, at most maxFileSDBytes.
func readFileSD(path string) ([]FileSDGroup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSDBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSDBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSDBytes)
	}
	var g []FileSDGroup
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// SweepFileSD removes the files in dir written by processes of this host
// that no longer run (killed before they could remove their own: an agent
// SIGKILLed after its stop grace). Files of other hosts (a directory shared
// over the network) and files without the labels are left alone; at most
// MaxFileSDFiles files are looked at. RegisterFileSD sweeps before it
// writes; `loom down` sweeps after it stopped the agents.
func SweepFileSD(dir string) {
	host, _ := os.Hostname()
	entries, err := os.ReadDir(dir)
	if err != nil || host == "" {
		return
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if n++; n > MaxFileSDFiles {
			return
		}
		path := filepath.Join(dir, e.Name())
		g, err := readFileSD(path)
		if err != nil || len(g) != 1 || g[0].Labels[FileSDHostLabel] != host {
			continue
		}
		pid, err := strconv.Atoi(g[0].Labels[FileSDPIDLabel])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if !proc.Alive(pid, 0) { // a zombie is dead too
			_ = os.Remove(path)
		}
	}
}
