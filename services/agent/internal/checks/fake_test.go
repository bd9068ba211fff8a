package checks

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/gpu"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// fakeDevice is a small gpu.Device for the checks' tests: GPUs whose
// readings and throughput a test sets (libs/gpu's simulated device is
// another helper's, and the checks must not depend on its details).
type fakeDevice struct {
	mu      sync.Mutex
	sim     bool
	infos   []gpu.Info
	samples []*loomv1.GpuSample
	factor  map[int]float64
	// block, when set, makes Sample wait on it, ignoring its context (a
	// hung driver call).
	block chan struct{}
}

func newFake(n int) *fakeDevice {
	d := &fakeDevice{sim: true, factor: map[int]float64{}}
	for i := range n {
		uuid := fmt.Sprintf("GPU-fake-%d", i)
		d.infos = append(d.infos, gpu.Info{Index: i, UUID: uuid, Name: "NVIDIA H200", DriverVersion: "550.54.15", CUDAVersion: "12.4",
			MemoryTotal: 141 << 30})
		d.samples = append(d.samples, &loomv1.GpuSample{Index: int32(i), Uuid: uuid, Name: "NVIDIA H200", TemperatureC: 40})
	}
	return d
}

func (d *fakeDevice) set(i int, f func(s *loomv1.GpuSample)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d.samples[i])
}

func (d *fakeDevice) Simulated() bool            { return d.sim }
func (d *fakeDevice) Info() []gpu.Info           { return d.infos }
func (d *fakeDevice) Inject(*loomv1.Fault) error { return nil }
func (d *fakeDevice) Close() error               { return nil }
func (d *fakeDevice) Xids(context.Context) ([]gpu.Xid, error) {
	return nil, nil
}

func (d *fakeDevice) Sample(ctx context.Context) ([]*loomv1.GpuSample, error) {
	if d.block != nil {
		<-d.block
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*loomv1.GpuSample
	for _, s := range d.samples {
		out = append(out, proto.Clone(s).(*loomv1.GpuSample))
	}
	return out, nil
}

func (d *fakeDevice) ThroughputFactor(i int) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.samples[i].GetLost() {
		return 0
	}
	if f, ok := d.factor[i]; ok {
		return f
	}
	return 1
}
