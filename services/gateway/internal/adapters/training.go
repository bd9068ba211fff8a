package adapters

import (
	"context"
	"errors"
	"fmt"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
)

// KeyTrainingAcceptedPrefix + "<project>" is a hash: training resource name
// → the resource as the gateway accepted it (proto bytes of a CustomJob,
// HyperparameterTuningJob or TrainingPipeline, the collection in its name
// saying which). It is written in the create's Apply, with its command, so
// that a Get or Cancel right after the create finds the resource before the
// training service has read the command, and so that the training quota
// counts it. Entries go when the quota's count sees the training service
// has the resource (or after app.TrainingAcceptedKeep), and with a delete.
const KeyTrainingAcceptedPrefix = "training-accepted:"

// PutTrainingAccepted records in tx the accepted resource name of project.
func PutTrainingAccepted(tx *store.Tx, project, name string, b []byte) {
	tx.HSet(KeyTrainingAcceptedPrefix+project, name, b)
}

// DelTrainingAccepted removes in tx the accepted record of name.
func DelTrainingAccepted(tx *store.Tx, project, name string) {
	tx.HDel(KeyTrainingAcceptedPrefix+project, name)
}

// TrainingAccepted reads the accepted record of name in project; NotFound
// when there is none.
func (r *Repo) TrainingAccepted(ctx context.Context, project, name string) ([]byte, error) {
	b, err := r.st.HGet(ctx, KeyTrainingAcceptedPrefix+project, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("accepted %s: %w", name, errs.NotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", errs.Unavailable, err)
	}
	return b, nil
}

// TrainingAcceptedAll reads project's accepted records.
func (r *Repo) TrainingAcceptedAll(ctx context.Context, project string) (map[string][]byte, error) {
	m, err := r.st.HGetAll(ctx, KeyTrainingAcceptedPrefix+project)
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", errs.Unavailable, err)
	}
	return m, nil
}

// DropTrainingAccepted removes accepted records the training service has
// taken over (best effort: a record left is dropped at the next count).
func (r *Repo) DropTrainingAccepted(ctx context.Context, project string, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	return r.st.Client().HDel(ctx, r.st.Key(KeyTrainingAcceptedPrefix+project), names...).Err()
}
