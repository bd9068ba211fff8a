package hpo

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func tcpu() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func TestTmpBreakdown(t *testing.T) {
	runtime.LockOSThread()
	sp := &space{}
	for range 8 {
		sp.params = append(sp.params, param{kind: kDouble, lo: 0, hi: 1, parent: -1})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ob []obs
	for range 1000 {
		x := sp.random(rng)
		s := 0.0
		for _, v := range x {
			s += (v - 0.3) * (v - 0.3)
		}
		ob = append(ob, obs{x, s})
	}
	var tf, tn, te time.Duration
	for i := range 200 {
		c0 := tcpu()
		m := newModel(sp, ob, rand.New(rand.NewPCG(uint64(i), 1)))
		c1 := tcpu()
		m.next(rand.New(rand.NewPCG(uint64(i), 2)))
		c2 := tcpu()
		for range 100000 {
			sink += expNeg(float64(i))
		}
		c3 := tcpu()
		tf += c1 - c0
		tn += c2 - c1
		te += c3 - c2
	}
	fmt.Println("newModel", tf/200, "next", tn/200, "100k expNeg", te/200)
}
