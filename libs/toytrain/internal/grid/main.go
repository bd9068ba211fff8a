// Command grid is a scratch tool: a small grid over the hyperparameters.
package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/toytrain"
)

func main() {
	epochs := flag.Int("epochs", 30, "")
	flag.Parse()
	best, bestH := 1e9, toytrain.Hyper{}
	start := time.Now()
	n := 0
	for _, hu := range []int{4, 16, 32, 64} {
		for _, wd := range []float64{0, 1e-4, 1e-3, 1e-2} {
			for _, bs := range []int{8, 32, 128} {
				for _, lr := range []float64{0.003, 0.01, 0.03, 0.1, 0.3, 1, 3} {
					h := toytrain.Hyper{LearningRate: lr, BatchSize: bs, WeightDecay: wd, HiddenUnits: hu}
					t, _ := toytrain.New(h, 1)
					for e := 0; e < *epochs; e++ {
						t.TrainEpoch()
						n++
					}
					v := t.ValidationLoss()
					if v < best {
						best, bestH = v, h
					}
					if wd == 1e-4 || hu == 32 && bs == 32 {
						fmt.Printf("hu %3d wd %g bs %3d lr %5g: val %.4f acc %.3f\n", hu, wd, bs, lr, v, t.Accuracy())
					}
				}
			}
		}
	}
	fmt.Printf("best %.4f at %+v; %d epochs in %v (%.3f ms/epoch)\n", best, bestH, n, time.Since(start), float64(time.Since(start).Microseconds())/1000/float64(n))
}
