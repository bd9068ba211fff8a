// Command nvmlprobe proves Loom's NVML collector (libs/gpu's NVML) on a
// machine with NVIDIA GPUs: it opens NVML, reads every GpuSample field of
// every GPU N times, times each collection (min, median, max), drains the
// Xid event set, and prints a markdown section for bench/REPORT.md with
// what it read (every field, its value, the fields NVML could not read and
// why). With no driver it says so and exits 0, so it can run anywhere.
//
//	go run ./bench/cmd/nvmlprobe -rounds 50 > /tmp/nvml.md
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// prober is what the probe reads: *gpu.NVML.
type prober interface {
	Info() []gpu.Info
	Sample(ctx context.Context) ([]*loomv1.GpuSample, error)
	FieldErrors(i int) map[string]string
	Xids(ctx context.Context) ([]gpu.Xid, error)
	XidError() error
}

func main() {
	rounds := flag.Int("rounds", 20, "collections to time")
	flag.Parse()
	os.Exit(run(os.Stdout, os.Stderr, *rounds, func() (prober, func() error, error) {
		d, err := gpu.OpenNVML()
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	}))
}

// run opens the device with open and writes the report to w.
func run(w, errw io.Writer, rounds int, open func() (prober, func() error, error)) int {
	if rounds < 1 {
		fmt.Fprintln(errw, "nvmlprobe: -rounds must be at least 1")
		return 2
	}
	host, _ := os.Hostname()
	d, closeFn, err := open()
	if err != nil {
		fmt.Fprintf(w, "## NVML collector on real GPUs (nvmlprobe)\n\nNo NVIDIA driver on %s (%s/%s): %v. Nothing was measured; the agent uses the simulated device here.\n",
			host, runtime.GOOS, runtime.GOARCH, err)
		return 0
	}
	defer func() {
		if err := closeFn(); err != nil {
			fmt.Fprintln(errw, "nvmlprobe:", err)
		}
	}()
	if err := report(w, d, host, rounds); err != nil {
		fmt.Fprintln(errw, "nvmlprobe:", err)
		return 1
	}
	return 0
}

// report collects rounds times and writes the markdown section.
func report(w io.Writer, d prober, host string, rounds int) error {
	ctx := context.Background()
	infos := d.Info()
	var took []time.Duration
	var last []*loomv1.GpuSample
	for range rounds {
		start := time.Now()
		s, err := d.Sample(ctx)
		if err != nil {
			return fmt.Errorf("sample: %w", err)
		}
		took = append(took, time.Since(start))
		last = s
	}
	xstart := time.Now()
	xids, xerr := d.Xids(ctx)
	xtook := time.Since(xstart)

	fmt.Fprintln(w, "## NVML collector on real GPUs (nvmlprobe)")
	fmt.Fprintln(w)
	driver, cuda := "", ""
	if len(infos) > 0 {
		driver, cuda = infos[0].DriverVersion, infos[0].CUDAVersion
	}
	fmt.Fprintf(w, "Host %s, %d GPU(s), driver %s, CUDA %s, measured %s. Rerun: `go run ./bench/cmd/nvmlprobe -rounds %d`.\n\n",
		host, len(infos), driver, cuda, time.Now().UTC().Format(time.RFC3339), rounds)
	fmt.Fprintln(w, "| GPU | name | UUID | bus id | memory | power limit | VBIOS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, in := range infos {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %d MiB | %.0f W | %s |\n", in.Index, in.Name, in.UUID, in.PCIBusID, in.MemoryTotal>>20, in.PowerLimitW, in.VBIOSVersion)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Time per collection (every field of all %d GPU(s), %d rounds): min %s, median %s, max %s; per GPU (median) %s. Draining the Xid event set: %s.\n\n",
		len(infos), rounds, minOf(took), median(took), slices.Max(took), median(took)/time.Duration(max(1, len(infos))), xtook)

	// Every field of GpuSample, by GPU: what the agent publishes.
	fmt.Fprint(w, "| field |")
	for _, s := range last {
		fmt.Fprintf(w, " GPU %d |", s.GetIndex())
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|")
	for range last {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	if len(last) > 0 {
		fds := last[0].ProtoReflect().Descriptor().Fields()
		for k := range fds.Len() {
			fd := fds.Get(k)
			fmt.Fprintf(w, "| %s |", fd.Name())
			for _, s := range last {
				fmt.Fprintf(w, " %s |", value(s.ProtoReflect().Get(fd), fd))
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	unreadable := false
	for i := range last {
		errs := d.FieldErrors(i)
		if len(errs) == 0 {
			continue
		}
		if !unreadable {
			fmt.Fprintln(w, "Fields NVML could not read (left 0):")
			fmt.Fprintln(w)
			unreadable = true
		}
		keys := make([]string, 0, len(errs))
		for k := range errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for j, k := range keys {
			parts[j] = k + ": " + errs[k]
		}
		fmt.Fprintf(w, "- GPU %d: %s\n", i, strings.Join(parts, "; "))
	}
	if !unreadable {
		fmt.Fprintln(w, "Every field was read on every GPU.")
	}
	fmt.Fprintln(w)
	switch {
	case xerr != nil:
		fmt.Fprintf(w, "Xid event set: reading failed: %v.\n", xerr)
	case d.XidError() != nil:
		fmt.Fprintf(w, "Xid event set: %v. %d Xid(s) pending.\n", d.XidError(), len(xids))
	default:
		fmt.Fprintf(w, "Xid event set: every GPU registered for Xid events; %d Xid(s) pending.\n", len(xids))
	}
	for _, x := range xids {
		fmt.Fprintf(w, "- GPU %d Xid %d: %s\n", x.GPU, x.Code, x.Message)
	}
	return nil
}

// value prints one field's value.
func value(v protoreflect.Value, fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.DoubleKind:
		return fmt.Sprintf("%.2f", v.Float())
	case protoreflect.Uint64Kind:
		if fd.Name() == "throttle_reasons" {
			return fmt.Sprintf("0x%x", v.Uint())
		}
	}
	return v.String()
}

func sorted(d []time.Duration) []time.Duration {
	c := slices.Clone(d)
	slices.Sort(c)
	return c
}

func minOf(d []time.Duration) time.Duration { return sorted(d)[0] }

func median(d []time.Duration) time.Duration {
	c := sorted(d)
	return c[len(c)/2]
}
