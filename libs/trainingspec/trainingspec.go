// Package trainingspec is the one grammar of serverless training requests
// (loom.training.v1): validation with the field and limit named, the
// pipeline task's decoding, and the list filter. The gateway validates with
// it before it accepts a request; the training service decodes with it.
//
// The bounds are the package's constants (validate.go); every refusal is an
// *errs.InvalidError naming the field path and the limit. The filter
// (filter.go) is AIP-160's subset that Vertex's List calls take; the
// training service's List RPCs match their resources with it.
//
// SEAM (issue 15): PipelineTask and the task names below are fixed.
package trainingspec

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/termtext"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Task definitions a TrainingPipeline may name (Vertex's schema files; any
// URI ending in one of these names is accepted).
const (
	CustomTask = "custom_task_1.0.0.yaml"
	TuningTask = "hyperparameter_tuning_task_1.0.0.yaml"
)

// PipelineTask decodes p's training_task_inputs by its
// training_task_definition: a CustomJobSpec for a custom task, or a
// HyperparameterTuningJob (study_spec, counts, trial_job_spec) for a tuning
// task. Exactly one result is non-nil when err is nil.
func PipelineTask(p *trainingv1.TrainingPipeline) (*trainingv1.CustomJobSpec, *trainingv1.HyperparameterTuningJob, error) {
	def := p.GetTrainingTaskDefinition()
	if p.GetTrainingTaskInputs() == nil {
		return nil, nil, fmt.Errorf("training_pipeline.training_task_inputs: required (an object)")
	}
	raw, err := protojson.Marshal(p.GetTrainingTaskInputs())
	if err != nil {
		// A number JSON has no word for (NaN, ±Inf) in the Value.
		return nil, nil, fmt.Errorf("training_pipeline.training_task_inputs: not JSON: %s", decodeError(err))
	}
	switch {
	case strings.HasSuffix(def, CustomTask):
		var spec trainingv1.CustomJobSpec
		if err := protojson.Unmarshal(raw, &spec); err != nil {
			return nil, nil, fmt.Errorf("training_pipeline.training_task_inputs: not a CustomJobSpec: %s", decodeError(err))
		}
		return &spec, nil, nil
	case strings.HasSuffix(def, TuningTask):
		var job trainingv1.HyperparameterTuningJob
		if err := protojson.Unmarshal(raw, &job); err != nil {
			return nil, nil, fmt.Errorf("training_pipeline.training_task_inputs: not a tuning task: %s", decodeError(err))
		}
		return nil, &job, nil
	}
	return nil, nil, fmt.Errorf("training_pipeline.training_task_definition: %q is neither ...%s nor ...%s", def, CustomTask, TuningTask)
}

// maxDecodeError bounds the decoder's message in a refusal: it quotes what
// the caller sent (an unknown field's whole name, up to MaxSpecBytes), and
// a refusal never echoes that back.
const maxDecodeError = 256

// decodeError is err's message as a refusal carries it: cut to
// maxDecodeError bytes, safe to print (termtext.Clean).
func decodeError(err error) string {
	return termtext.Clean(err.Error(), maxDecodeError)
}
