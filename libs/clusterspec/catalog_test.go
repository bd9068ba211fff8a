package clusterspec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestCatalog(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		acc   string
		count int32
	}{
		"a2-highgpu-1g":   {"nvidia-tesla-a100", 1},
		"a2-highgpu-8g":   {"nvidia-tesla-a100", 8},
		"a2-ultragpu-4g":  {"nvidia-a100-80gb", 4},
		"a3-highgpu-8g":   {"nvidia-h100-80gb", 8},
		"a3-megagpu-8g":   {"nvidia-h100-mega-80gb", 8},
		"a3-ultragpu-8g":  {"nvidia-h200-141gb", 8},
		"a4-highgpu-8g":   {"nvidia-b200", 8},
		"g2-standard-48":  {"nvidia-l4", 4},
		"n2-standard-2":   {"", 0},
		"n2-standard-128": {"", 0},
		"c2-standard-60":  {"", 0},
	}
	for name, w := range want {
		m, ok := Machine(name)
		if !ok || m.AcceleratorType != w.acc || m.AcceleratorCount != w.count {
			t.Errorf("Machine(%q) = %+v, %v; want %s × %d", name, m, ok, w.acc, w.count)
		}
	}
	if _, ok := Machine("a3-ultragpu-4g"); ok {
		t.Error("Machine found a type that does not exist")
	}
	all := Machines()
	if len(all) < 35 {
		t.Fatalf("Machines() has %d entries", len(all))
	}
	for _, m := range all {
		if m.VCPUs <= 0 || m.MemoryGiB <= 0 || len(m.BootDiskTypes) == 0 || m.Family == "" || !strings.HasPrefix(m.Name, m.Family+"-") {
			t.Errorf("%s: incomplete entry %+v", m.Name, m)
		}
		if m.HasGPUs() != (m.AcceleratorType != "") || m.HasGPUs() != (m.GresType != "") || m.HasGPUs() != (m.GPUMemoryGiB > 0) {
			t.Errorf("%s: GPU fields disagree: %+v", m.Name, m)
		}
		for _, d := range m.BootDiskTypes {
			if !slices.Contains(BootDiskTypes, d) {
				t.Errorf("%s: unknown boot disk type %s", m.Name, d)
			}
		}
		// Every catalog entry makes a valid one-pool cluster once normalized.
		c := &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "p", MachineType: m.Name, NodeCount: 1}}}}
		if err := Validate(c); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
	all[0].BootDiskTypes[0] = "changed"
	if m, _ := Machine(all[0].Name); m.BootDiskTypes[0] == "changed" {
		t.Error("Machines() shares the catalog's slices")
	}
	if got := SuggestMachines(strings.Repeat("x", 100)); len(got) != 0 {
		t.Errorf("SuggestMachines(long junk) = %v", got)
	}
}

// TestEveryGPUHasAName: each GPU machine type names its GPUs as nvidia-smi
// does, and a CPU-only type names none.
func TestEveryGPUHasAName(t *testing.T) {
	t.Parallel()
	for _, m := range Machines() {
		if got := m.GPUName(); m.HasGPUs() != (got != "") || (got != "" && !strings.HasPrefix(got, "NVIDIA ")) {
			t.Errorf("%s (%s, %d GPUs): GPUName %q", m.Name, m.AcceleratorType, m.AcceleratorCount, got)
		}
	}
	if m, _ := Machine("a3-highgpu-8g"); m.GPUName() != "NVIDIA H100 80GB HBM3" {
		t.Errorf("a3-highgpu-8g's GPUs are %q", m.GPUName())
	}
}

func TestStorageTiers(t *testing.T) {
	t.Parallel()
	for _, tier := range ScratchTiers() {
		if tier.MinGiB%tier.StepGiB != 0 || tier.MaxGiB%tier.StepGiB != 0 {
			t.Errorf("scratch tier %d: min/max not on the step", tier.ThroughputMBpsPerTiB)
		}
		// The smallest filesystem of every tier has the same total throughput.
		if got := int64(tier.MinGiB) * int64(tier.ThroughputMBpsPerTiB); got != 9000*1000 {
			t.Errorf("scratch tier %d: min × throughput = %d", tier.ThroughputMBpsPerTiB, got)
		}
	}
	for _, tier := range HomeTiers() {
		if _, ok := Home(tier.Name); !ok || tier.MinGiB > tier.MaxGiB || tier.StepGiB < 1 {
			t.Errorf("home tier %+v", tier)
		}
	}
	if _, ok := Scratch(300); ok {
		t.Error("Scratch(300) found a tier")
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	c := base(t)
	if got := ClusterID(c); got != "base" {
		t.Errorf("ClusterID = %q", got)
	}
	if got := HostPrefix(c, "gpu-a"); got != "a3u" {
		t.Errorf("HostPrefix(gpu-a) = %q", got)
	}
	if got := HostPrefix(c, "nope"); got != "nope" {
		t.Errorf("HostPrefix(nope) = %q", got)
	}
	if got := Hostname("a3u", 7); got != "a3u-0007" {
		t.Errorf("Hostname = %q", got)
	}
	if got := Hostname("a3u", 12345); got != "a3u-12345" {
		t.Errorf("Hostname = %q", got)
	}
	if got := LoginHostname("base", 1); got != "base-login-001" {
		t.Errorf("LoginHostname = %q", got)
	}
	for h, want := range map[string]struct {
		prefix string
		n      int
		ok     bool
	}{
		"a3u-0007":       {"a3u", 7, true},
		"a3u-debug-0012": {"a3u-debug", 12, true},
		"a3u-12345":      {"a3u", 12345, true},
		"base-login-001": {"", 0, false},
		"a3u-00x1":       {"", 0, false},
		"0001":           {"", 0, false},
		"-0001":          {"", 0, false},
	} {
		p, n, ok := ParseHostname(h)
		if p != want.prefix || n != want.n || ok != want.ok {
			t.Errorf("ParseHostname(%q) = %q %d %v", h, p, n, ok)
		}
	}
	if p, ok := Pool(c, "cpu"); !ok || p.GetMachineType() != "n2-standard-8" {
		t.Errorf("Pool(cpu) = %v %v", p, ok)
	}
	if ns, ok := NodeSetForPool(c, "gpu-b"); !ok || ns.GetId() != "a3h" {
		t.Errorf("NodeSetForPool(gpu-b) = %v %v", ns, ok)
	}
}

func TestParseMaxTime(t *testing.T) {
	t.Parallel()
	ok := map[string]time.Duration{
		"30":         30 * time.Minute,
		"30:15":      30*time.Minute + 15*time.Second,
		"1:00:00":    time.Hour,
		"100:00:00":  100 * time.Hour,
		"2-12":       60 * time.Hour,
		"1-00:30":    24*time.Hour + 30*time.Minute,
		"1-00:00:01": 24*time.Hour + time.Second,
		"36500-0":    36500 * 24 * time.Hour, // a century, the most
	}
	for s, want := range ok {
		d, unlimited, err := ParseMaxTime(s)
		if err != nil || unlimited || d != want {
			t.Errorf("ParseMaxTime(%q) = %v %v %v, want %v", s, d, unlimited, err, want)
		}
	}
	for _, s := range []string{"UNLIMITED", "infinite", "Unlimited"} {
		if _, unlimited, err := ParseMaxTime(s); err != nil || !unlimited {
			t.Errorf("ParseMaxTime(%q) = %v %v", s, unlimited, err)
		}
	}
	for _, s := range []string{"", "0", "0:00:00", "1:2:3:4", "1-2:3:4:5", "1-24", "1:60", "1:00:60", "abc", "-5", "1h", "12345678", "1-",
		// Past a century: 213503 days and a bit is 2^64 ns, which wrapped to
		// a limit of about one second; more wrapped to none at all.
		"213503-23:34:35", "9999999-0", "36501-0"} {
		if d, _, err := ParseMaxTime(s); err == nil {
			t.Errorf("ParseMaxTime(%q) = %v, want an error", s, d)
		}
	}
}

// TestDocsCatalogTable keeps the machine table in docs/clusters.md equal to the catalog.
func TestDocsCatalogTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "clusters.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Machines() {
		gpus, acc, ssd := "—", "—", "—"
		if m.HasGPUs() {
			gpus = fmt.Sprintf("%d × %s", m.AcceleratorCount, m.AcceleratorModel)
			acc = "`" + m.AcceleratorType + "`"
		}
		if m.LocalSSDGiB > 0 {
			ssd = fmt.Sprint(m.LocalSSDGiB)
		}
		row := fmt.Sprintf("| `%s` | %s | %s | %d | %d | %s | %s |", m.Name, gpus, acc, m.VCPUs, m.MemoryGiB, ssd, strings.Join(m.BootDiskTypes, ", "))
		if !strings.Contains(string(doc), row+"\n") {
			t.Errorf("docs/clusters.md lacks the row\n%s", row)
		}
	}
}
