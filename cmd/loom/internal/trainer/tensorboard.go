package trainer

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/loom-ml/loom/libs/tbevents"
)

// TensorBoard: the mlp also writes its per-epoch scalars as a TensorBoard
// event file into the job's TensorBoard directory, which the agent tails
// (docs/metrics.md). Its tags are Keras's layout (train/ and validation/),
// distinct from the hypertune line's val_loss and accuracy, so that the
// two sources never write the same series twice.
const (
	// EnvTensorBoardDir is Loom's TensorBoard directory variable (Slurm
	// jobs); EnvAIPTensorBoardDir Vertex's (CustomJobs), read when it is
	// unset.
	EnvTensorBoardDir    = "LOOM_TENSORBOARD_LOG_DIR"
	EnvAIPTensorBoardDir = "AIP_TENSORBOARD_LOG_DIR"
)

// Tags of the scalars the trainer writes.
const (
	TagTrainLoss   = "train/loss"
	TagValLoss     = "validation/loss"
	TagValAccuracy = "validation/accuracy"
)

// tbWriter writes the epochs' scalars into an event file of its own.
type tbWriter struct {
	w *tbevents.FileWriter
}

// openTensorBoard starts a new event file in dir, named as TensorFlow
// names them (host and pid, so that a resumed run's file is another).
func openTensorBoard(dir string) (*tbWriter, error) {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	w, err := tbevents.Create(dir, host+"."+strconv.Itoa(os.Getpid())+".v2", time.Now())
	if err != nil {
		return nil, err
	}
	return &tbWriter{w: w}, nil
}

// report writes epoch's scalars and flushes them, so that the agent reads
// each epoch as it ends.
func (t *tbWriter) report(epoch int, m Metrics) error {
	now := time.Now()
	for _, s := range []struct {
		tag string
		v   float64
	}{{TagTrainLoss, m.TrainLoss}, {TagValLoss, m.ValLoss}, {TagValAccuracy, m.Accuracy}} {
		if err := t.w.AddScalar(s.tag, int64(epoch), now, s.v); err != nil {
			return fmt.Errorf("tensorboard: %w", err)
		}
	}
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	return nil
}

func (t *tbWriter) close() { _ = t.w.Close() }
