package gpu

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// xidCatalog is NVIDIA's Xid catalog as gpud publishes it (xid, mnemonic,
// description, immediate and investigatory resolution), a copy of
// shared/data/health/nvidia_xid_catalog_via_gpud.csv: the simulated device
// and the NVML event reader give an Xid the driver's description.
//
//go:embed xid_catalog.csv
var xidCatalog string

var (
	xidOnce  sync.Once
	xidTexts map[int]string
)

// XidDescription is the catalog's description of Xid code ("GPU has fallen
// off the bus" for 79), or "Xid <code>" for a code the catalog lacks.
func XidDescription(code int) string {
	xidOnce.Do(func() {
		xidTexts = map[int]string{}
		rows, err := csv.NewReader(strings.NewReader(xidCatalog)).ReadAll()
		if err != nil {
			return
		}
		for _, r := range rows[1:] {
			n, err := strconv.Atoi(r[0])
			if err == nil && len(r) > 2 {
				xidTexts[n] = r[2]
			}
		}
	})
	if d := xidTexts[code]; d != "" && d != "Unused" {
		return d
	}
	return fmt.Sprintf("Xid %d", code)
}

// XidLogLine is the kernel-log line the NVIDIA driver writes for an Xid
// (the shape of the dmesg sample in shared data and what gpud parses):
// "NVRM: Xid (PCI:0000:18:00): 79, pid=…, name=…, GPU has fallen off the bus."
func XidLogLine(pciBusID string, code int, text string) string {
	// The kernel line names the bus id without the function (".0"), with
	// a four-digit domain.
	bus := strings.TrimSuffix(pciBusID, ".0")
	if len(bus) > 12 && strings.HasPrefix(bus, "0000") {
		bus = bus[4:]
	}
	return fmt.Sprintf("NVRM: Xid (PCI:%s): %d, pid='<unknown>', name=<unknown>, %s", bus, code, text)
}
