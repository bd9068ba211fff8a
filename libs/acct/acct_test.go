package acct

import (
	"math"
	"testing"
	"time"
)

func TestUsageKeepsPeaksAndCounters(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var u Usage
	u = u.Sample(Sample{UserCPU: 2 * time.Second, SystemCPU: time.Second, RSS: 100, VMSize: 300, Read: 10, Write: 20}, t0)
	// A child exited: the group's sums fall; peaks and counters stay.
	u = u.Sample(Sample{UserCPU: time.Second, SystemCPU: time.Second / 2, RSS: 40, VMSize: 200, Read: 5, Write: 30}, t0.Add(time.Second))
	want := Usage{UserCPU: 2 * time.Second, SystemCPU: time.Second, MaxRSS: 100, RSS: 40, MaxVMSize: 300, Read: 10, Write: 30, Time: t0.Add(time.Second)}
	if u != want {
		t.Fatalf("after two samples %+v, want %+v", u, want)
	}
	// The kernel's count at the end: higher CPU and a child's higher peak
	// win; nothing stays resident.
	f := u.Final(5*time.Second, time.Second/2, 70, t0.Add(2*time.Second))
	want = Usage{UserCPU: 5 * time.Second, SystemCPU: time.Second, MaxRSS: 100, MaxVMSize: 300, Read: 10, Write: 30, Time: t0.Add(2 * time.Second)}
	if f != want {
		t.Fatalf("final %+v, want %+v", f, want)
	}
	if f = u.Final(0, 0, 500, t0); f.MaxRSS != 500 {
		t.Errorf("a waited-for child's peak of 500 gives max RSS %d", f.MaxRSS)
	}
	// A hostile or broken sample never makes a negative resident size.
	if u = (Usage{}).Sample(Sample{RSS: -5}, t0); u.RSS != 0 || u.MaxRSS != 0 {
		t.Errorf("negative RSS sample gave %+v", u)
	}
}

func TestSampleGPU(t *testing.T) {
	t.Parallel()
	var u Usage
	u = u.SampleGPU(2, 90, 10<<30)
	u = u.SampleGPU(2, 60, 30<<30)
	u = u.SampleGPU(2, 150, 20<<30) // clipped to 100
	if u.GPUs != 2 || u.GPUSamples != 3 || u.GPUUtil != 250.0/3 || u.MaxGPUMem != 30<<30 {
		t.Errorf("after three readings %+v: want 2 GPUs, mean %.2f%%, peak 30 GiB", u, 250.0/3)
	}
	// No GPUs, or a reading that is not a number, changes nothing.
	if v := u.SampleGPU(0, 50, 1); v != u {
		t.Errorf("a reading of no GPUs changed %+v to %+v", u, v)
	}
	if v := u.SampleGPU(2, math.NaN(), 1); v != u {
		t.Errorf("a NaN reading changed %+v to %+v", u, v)
	}
	if p := u.Proto(3, "gpu-0001"); p.GetGpus() != 2 || p.GetMaxGpuMemoryBytes() != 30<<30 || p.GetRank() != 3 || p.GetNode() != "gpu-0001" {
		t.Errorf("proto %v", p)
	}
}
