package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// simProber is the simulated device in the probe's shape, with one field
// NVML would not read.
type simProber struct{ *gpu.Simulated }

func (simProber) FieldErrors(i int) map[string]string {
	if i == 1 {
		return map[string]string{"retired_pages_sbe": "Not Supported"}
	}
	return nil
}
func (simProber) XidError() error { return nil }

func TestReportReadsEveryField(t *testing.T) {
	t.Parallel()
	s, err := gpu.OpenSimulated(gpu.Options{Count: 2, StateDir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 1, Xid: 13}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(&out, &errb, 5, func() (prober, func() error, error) { return simProber{s}, s.Close, nil })
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	fds := (&loomv1.GpuSample{}).ProtoReflect().Descriptor().Fields()
	for k := range fds.Len() {
		if !strings.Contains(got, "| "+string(fds.Get(k).Name())+" |") {
			t.Errorf("report lacks field %s", fds.Get(k).Name())
		}
	}
	for _, want := range []string{"## NVML collector on real GPUs (nvmlprobe)", "5 rounds): min ", "median ", "max ",
		"| 1 | NVIDIA H200 |", "- GPU 1: retired_pages_sbe: Not Supported", "1 Xid(s) pending", "- GPU 1 Xid 13: "} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

func TestNoDriver(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run(&out, &errb, 3, func() (prober, func() error, error) {
		return nil, nil, errors.New("NVML init: ERROR_LIBRARY_NOT_FOUND")
	})
	if code != 0 || !strings.Contains(out.String(), "No NVIDIA driver on") || !strings.Contains(out.String(), "Nothing was measured") {
		t.Errorf("exit %d: %q", code, out.String())
	}
}

// The real main's opener with no driver here.
func TestNoDriverReal(t *testing.T) {
	t.Parallel()
	if gpu.NVMLAvailable() {
		t.Skip("a driver loads here")
	}
	var out bytes.Buffer
	code := run(&out, &out, 2, func() (prober, func() error, error) {
		d, err := gpu.OpenNVML()
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	})
	if code != 0 || !strings.Contains(out.String(), "No NVIDIA driver") {
		t.Errorf("exit %d: %q", code, out.String())
	}
}
