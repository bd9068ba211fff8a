package procruntime

import (
	"os"
	"strconv"
	"testing"

	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// BenchmarkStartWait is what a step's start and end cost the agent, with
// and without the loom-stepd shim: go test -run '^$' -bench StartWait
// -benchtime 200x ./services/agent/internal/adapters/procruntime/
func BenchmarkStartWait(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"direct", asAgent}, {"shim", Options{AllowRoot: true, StateDir: b.TempDir()}}} {
		b.Run(mode.name, func(b *testing.B) {
			rt := New(mode.opts)
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			for i := 0; b.Loop(); i++ {
				p, err := rt.Start(ports.Spec{Argv: []string{"/bin/true"}, Dir: "/", Stdout: devnull, Stderr: devnull,
					Nice: 10, Name: "bench-" + strconv.Itoa(i)})
				if err != nil {
					b.Fatal(err)
				}
				if e := p.Wait(); e.Code != 0 {
					b.Fatalf("exit %+v", e)
				}
				rt.Forget("bench-" + strconv.Itoa(i))
			}
		})
	}
}
