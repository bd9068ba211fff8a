package clusterspec

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// MachineType is one entry of the machine catalog: what a node of that type has.
// The figures follow the public cloud's published shapes (GPU machine types
// bundle their GPUs; the A2 Ultra, A3, A4 and G2 types also bundle local SSD).
type MachineType struct {
	// Name is the machine type, e.g. "a3-ultragpu-8g".
	Name string `json:"name"`
	// Family is the machine series, e.g. "a3".
	Family string `json:"family"`
	// AcceleratorType is the GPU's accelerator type name, e.g. "nvidia-h200-141gb";
	// "" for CPU-only machine types.
	AcceleratorType string `json:"accelerator_type"`
	// AcceleratorModel is the GPU for people, e.g. "NVIDIA H200 141GB".
	AcceleratorModel string `json:"accelerator_model"`
	// GresType is the Slurm GRES type of the GPU (gres.conf "Type="), e.g. "h200".
	GresType string `json:"gres_type"`
	// AcceleratorCount is the number of GPUs per node (0 for CPU-only types).
	AcceleratorCount int32 `json:"accelerator_count"`
	// GPUMemoryGiB is the memory of one GPU.
	GPUMemoryGiB int32 `json:"gpu_memory_gib"`
	VCPUs        int32 `json:"vcpus"`
	MemoryGiB    int32 `json:"memory_gib"`
	// LocalSSDGiB is the bundled local SSD (0 when none is bundled).
	LocalSSDGiB int32 `json:"local_ssd_gib"`
	// BootDiskTypes are the boot disk types the machine type supports, the
	// preferred first after pd-balanced (see DefaultBootDiskType).
	BootDiskTypes []string `json:"boot_disk_types"`
}

// MemoryReserve is the share of a machine's memory left to the OS and the
// agent: slurmd drains a node that has less memory than its RealMemory says.
const MemoryReserve = 0.05

// SchedulableMemoryMiB is the memory jobs may ask for on one machine of the
// type (--mem): its memory less MemoryReserve. It is slurm.conf's RealMemory
// and what the scheduler counts, one figure, so that a job Loom places is one
// that a Slurm reading Loom's slurm.conf would place too.
func (m MachineType) SchedulableMemoryMiB() int64 {
	return int64(float64(m.MemoryGiB) * 1024 * (1 - MemoryReserve))
}

// HasGPUs reports whether the machine type has accelerators.
func (m MachineType) HasGPUs() bool { return m.AcceleratorCount > 0 }

// GPUName is the name nvidia-smi (NVML's nvmlDeviceGetName) gives the
// machine type's GPUs, e.g. "NVIDIA H100 80GB HBM3"; "" for a CPU-only
// type. A node's simulated GPUs take it (the local provider passes it to
// the agent), so that nvidia-smi on an a3-highgpu-8g shows H100s.
func (m MachineType) GPUName() string {
	return gpuNames[m.AcceleratorType]
}

// gpuNames are nvidia-smi's names of the catalog's accelerator types
// (TestEveryGPUHasAName).
var gpuNames = map[string]string{
	"nvidia-h200-141gb":     "NVIDIA H200",
	"nvidia-h100-80gb":      "NVIDIA H100 80GB HBM3",
	"nvidia-h100-mega-80gb": "NVIDIA H100 80GB HBM3",
	"nvidia-a100-80gb":      "NVIDIA A100-SXM4-80GB",
	"nvidia-tesla-a100":     "NVIDIA A100-SXM4-40GB",
	"nvidia-b200":           "NVIDIA B200",
	"nvidia-l4":             "NVIDIA L4",
}

// SupportsBootDisk reports whether diskType can be this machine type's boot disk.
func (m MachineType) SupportsBootDisk(diskType string) bool {
	return slices.Contains(m.BootDiskTypes, diskType)
}

//go:embed catalog.json
var catalogJSON []byte

var (
	catalog      map[string]MachineType
	catalogOrder []string
)

func init() {
	var list []MachineType
	if err := json.Unmarshal(catalogJSON, &list); err != nil {
		panic(fmt.Sprintf("clusterspec: embedded catalog.json: %v", err)) // a build defect, caught by every test
	}
	catalog = make(map[string]MachineType, len(list))
	for _, m := range list {
		if _, dup := catalog[m.Name]; dup {
			panic(fmt.Sprintf("clusterspec: catalog.json lists %s twice", m.Name))
		}
		catalog[m.Name] = m
		catalogOrder = append(catalogOrder, m.Name)
	}
}

// Machine returns the catalog entry of a machine type.
func Machine(name string) (MachineType, bool) {
	m, ok := catalog[name]
	if ok {
		m.BootDiskTypes = slices.Clone(m.BootDiskTypes)
	}
	return m, ok
}

// Machines returns the whole catalog in its listed order (by family, then size).
// The result is a copy; changing it changes nothing.
func Machines() []MachineType {
	out := make([]MachineType, 0, len(catalogOrder))
	for _, n := range catalogOrder {
		m, _ := Machine(n)
		out = append(out, m)
	}
	return out
}

// SuggestMachines returns up to three catalog names close to an unknown name
// (small edit distance, or the same series), closest first.
func SuggestMachines(name string) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for _, n := range catalogOrder {
		d := editDistance(name, n)
		if d <= 3 {
			cs = append(cs, cand{n, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	out := make([]string, 0, 3)
	for _, c := range cs {
		if len(out) == 3 {
			break
		}
		out = append(out, c.name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Far from every catalog name; skip the quadratic work on hostile input.
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
