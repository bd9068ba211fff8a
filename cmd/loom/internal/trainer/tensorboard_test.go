package trainer

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/loom-ml/loom/libs/tbevents"
)

// TestMLPTensorBoard: the mlp writes one event file per run into the
// TensorBoard directory ($AIP_TENSORBOARD_LOG_DIR as a file:// URI here),
// with its three scalars per epoch, the last epoch's equal to the model's
// metrics (as float32, TensorBoard's precision).
func TestMLPTensorBoard(t *testing.T) {
	t.Parallel()
	cfg := mlpConfig(t, 5)
	dir := filepath.Join(t.TempDir(), "logs")
	if err := cfg.FromEnv(func(k string) string {
		if k == EnvAIPTensorBoardDir {
			return "file://" + dir
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files %v, want one", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := tbevents.ReadScalars(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 15 {
		t.Fatalf("%d scalars, want 3 per epoch for 5 epochs", len(got))
	}
	last := map[string]float64{}
	for _, s := range got {
		if s.Step == 5 {
			last[s.Tag] = s.Value
		}
	}
	m := res.MLP.Metrics
	if last[TagValLoss] != float64(float32(m.ValLoss)) || last[TagValAccuracy] != float64(float32(m.Accuracy)) || last[TagTrainLoss] != float64(float32(m.TrainLoss)) {
		t.Errorf("epoch 5 scalars %v, model's metrics %+v", last, m)
	}
}
