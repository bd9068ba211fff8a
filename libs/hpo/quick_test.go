package hpo_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/hpo/testfuncs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

func TestQuickLook(t *testing.T) {
	for _, f := range testfuncs.All() {
		for _, alg := range []trainingv1.StudySpec_Algorithm{trainingv1.StudySpec_RANDOM_SEARCH, trainingv1.StudySpec_ALGORITHM_UNSPECIFIED} {
			start := time.Now()
			sum := 0.0
			for seed := int64(1); seed <= 3; seed++ {
				tr, err := testfuncs.Run(f, alg, seed, 50, 1)
				if err != nil {
					t.Fatal(err)
				}
				sum += math.Log10(tr[len(tr)-1] - f.Optimum + 1e-9)
			}
			fmt.Printf("%-20s %-22v log10 regret %.2f  %v\n", f.Name, alg, sum/3, time.Since(start)/3)
		}
	}
}
