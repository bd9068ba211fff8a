package clusterspec

import "slices"

// HomeTier is a service tier of the shared home filesystem (Filestore-like):
// the capacities it can be created with.
type HomeTier struct {
	// Name is the tier as written in storage.home.tier, e.g. "ZONAL".
	Name    string
	MinGiB  int32
	MaxGiB  int32
	StepGiB int32
}

// ScratchTier is a performance tier of the scratch parallel filesystem
// (Lustre-like): capacity is bought in steps, and lower throughput per TiB
// needs a larger minimum so that the filesystem's total throughput is the same
// at the smallest size of every tier (9000 GiB at 1000 MB/s/TiB ≈ 72000 GiB at 125).
type ScratchTier struct {
	ThroughputMBpsPerTiB int32
	MinGiB               int32
	MaxGiB               int32
	StepGiB              int32
}

// The tiers, as data. Home follows Filestore's published ranges (BASIC tiers
// in 1 GiB steps; ZONAL and REGIONAL in 256 GiB steps); scratch follows
// Managed Lustre's tiers, with one maximum (7,632,000 GiB, a multiple of
// every step) for all of them.
var (
	homeTiers = []HomeTier{
		{Name: "BASIC_HDD", MinGiB: 1024, MaxGiB: 65434, StepGiB: 1},
		{Name: "BASIC_SSD", MinGiB: 2560, MaxGiB: 65434, StepGiB: 1},
		{Name: "ZONAL", MinGiB: 1024, MaxGiB: 102400, StepGiB: 256},
		{Name: "REGIONAL", MinGiB: 1024, MaxGiB: 102400, StepGiB: 256},
	}
	scratchTiers = []ScratchTier{
		{ThroughputMBpsPerTiB: 125, MinGiB: 72000, MaxGiB: 7632000, StepGiB: 72000},
		{ThroughputMBpsPerTiB: 250, MinGiB: 36000, MaxGiB: 7632000, StepGiB: 36000},
		{ThroughputMBpsPerTiB: 500, MinGiB: 18000, MaxGiB: 7632000, StepGiB: 18000},
		{ThroughputMBpsPerTiB: 1000, MinGiB: 9000, MaxGiB: 7632000, StepGiB: 9000},
	}
)

// Defaults Normalize fills into storage sections that are present.
const (
	DefaultHomeTier          = "ZONAL"
	DefaultScratchThroughput = 1000
	DefaultHomeMountPath     = "/home"
	DefaultScratchMountPath  = "/scratch"
)

// HomeTiers returns the shared home tiers (a copy).
func HomeTiers() []HomeTier { return slices.Clone(homeTiers) }

// ScratchTiers returns the scratch tiers, slowest first (a copy).
func ScratchTiers() []ScratchTier { return slices.Clone(scratchTiers) }

// Home returns the home tier named name.
func Home(name string) (HomeTier, bool) {
	for _, t := range homeTiers {
		if t.Name == name {
			return t, true
		}
	}
	return HomeTier{}, false
}

// Scratch returns the scratch tier of a throughput (MB/s per TiB).
func Scratch(throughput int32) (ScratchTier, bool) {
	for _, t := range scratchTiers {
		if t.ThroughputMBpsPerTiB == throughput {
			return t, true
		}
	}
	return ScratchTier{}, false
}
