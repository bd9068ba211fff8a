package gpu

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Open returns the node's GPUs: NVML when !o.Simulate and a driver loads
// that shows at least one GPU, else the simulated device (OpenSimulated).
func Open(o Options) (Device, error) {
	if !o.Simulate {
		d, err := OpenNVML()
		if err == nil && len(d.Info()) > 0 {
			return d, nil
		}
		if err == nil {
			_ = d.Close()
		}
	}
	return OpenSimulated(o)
}

// NVMLAvailable reports whether an NVIDIA driver loads here and shows at
// least one GPU (NVML Init and a device count; Shutdown after).
func NVMLAvailable() bool {
	d, err := OpenNVML()
	if err != nil {
		return false
	}
	defer d.Close()
	return len(d.Info()) > 0
}

// diskUsager is a device that reports disk usage itself (the simulated
// one, whose disk can be made full).
type diskUsager interface {
	DiskUsage(paths ...string) []*loomv1.DiskSample
}

// Disks is the disk usage of the filesystems holding paths as the node
// sees it: d's own report when d has one (the simulated device, with
// FAULT_DISK_FULL), else DiskUsage.
func Disks(d Device, paths ...string) []*loomv1.DiskSample {
	if du, ok := d.(diskUsager); ok {
		return du.DiskUsage(paths...)
	}
	return DiskUsage(paths...)
}

// DiskUsage is the usage of each filesystem holding one of paths, once
// per filesystem, by mount point (statfs; used = total - free, as df
// counts it, blocks reserved for root included). Paths that do not exist
// are skipped; no paths means "/".
func DiskUsage(paths ...string) []*loomv1.DiskSample {
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	mounts := mountPoints()
	seen := map[string]bool{}
	var out []*loomv1.DiskSample
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			abs = r
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(abs, &fs); err != nil {
			continue
		}
		mount := mountOf(abs, mounts)
		if seen[mount] {
			continue
		}
		seen[mount] = true
		bs := uint64(fs.Bsize)
		out = append(out, &loomv1.DiskSample{Mount: mount, TotalBytes: fs.Blocks * bs, UsedBytes: (fs.Blocks - fs.Bfree) * bs})
	}
	return out
}

// mountPoints lists the mount points of this mount namespace, longest
// first (/proc/self/mounts; nil where there is none).
func mountPoints() []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 {
			out = append(out, unescapeMount(fields[1]))
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes /proc/mounts' octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var n int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &n); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountOf is the mount point holding path: the longest mount point that
// is path or one of its parents ("/" when none is known).
func mountOf(path string, mounts []string) string {
	for _, m := range mounts {
		if m == "/" || path == m || strings.HasPrefix(path, m+"/") {
			return m
		}
	}
	return "/"
}

// errNoNVML is OpenNVML's error where this binary was built without cgo.
var errNoNVML = errors.New("NVML is not available: this binary was built without cgo")
