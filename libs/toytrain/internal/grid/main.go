// Command grid trains libs/toytrain on a small grid of hyperparameters and
// prints the validation loss of each point after -epochs epochs, the best
// ones first, and the time per epoch: the numbers docs/training.md quotes.
//
//	go run ./libs/toytrain/internal/grid -epochs 30
package main

import (
	"flag"
	"fmt"
	"sort"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/toytrain"
)

func main() {
	epochs := flag.Int("epochs", 30, "epochs per point")
	seed := flag.Int64("seed", 1, "trainer seed")
	top := flag.Int("top", 10, "points to print")
	flag.Parse()
	type point struct {
		h        toytrain.Hyper
		val, acc float64
	}
	var pts []point
	start, cpu0 := time.Now(), cpuTime()
	n := 0
	for _, hu := range []int{4, 16, 64} {
		for _, wd := range []float64{0, 1e-4, 1e-3, 1e-2} {
			for _, bs := range []int{8, 32, 128} {
				for _, lr := range []float64{0.01, 0.03, 0.1, 0.3, 1, 3} {
					h := toytrain.Hyper{LearningRate: lr, BatchSize: bs, WeightDecay: wd, HiddenUnits: hu}
					t, err := toytrain.New(h, *seed)
					if err != nil {
						panic(err)
					}
					for t.Epoch() < *epochs {
						t.TrainEpoch()
						n++
					}
					v, a := t.Validation()
					pts = append(pts, point{h, v, a})
				}
			}
		}
	}
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].val < pts[j].val })
	fmt.Printf("%d points x %d epochs; per epoch (mean over the grid): %.2f ms wall, %.2f ms CPU\n",
		len(pts), *epochs, ms(el)/float64(n), ms(cpu)/float64(n))
	fmt.Println("val_loss  accuracy  learning_rate  batch_size  weight_decay  hidden_units")
	for i, p := range pts {
		switch {
		case i == *top && i < len(pts)-3:
			fmt.Println("...")
			continue
		case i > *top && i < len(pts)-3:
			continue
		}
		fmt.Printf("%8.4f  %8.3f  %13g  %10d  %12g  %12d\n", p.val, p.acc, p.h.LearningRate, p.h.BatchSize, p.h.WeightDecay, p.h.HiddenUnits)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cpuTime is the process's user+system CPU time: on a shared machine the
// wall time per epoch says more about the neighbours than about the model.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
