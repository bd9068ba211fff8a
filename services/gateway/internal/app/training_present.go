package app

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Training resources are shown as jobs are (docs/security.md): with
// PrivateData "jobs", a caller who does not administer the project sees
// only their own (another's is NotFound, or absent from a list); and the
// environment their replicas get (container_spec.env,
// python_package_spec.env, which may hold secrets) only to their owner and
// admins.

// trainingVisible is what the caller may see of a training resource
// (owner user): nil when it is hidden from them (PrivateData), else m,
// stripped of its environments unless the caller owns or administers it.
func trainingVisible[T interface {
	proto.Message
	GetName() string
	GetUser() string
}](ctx context.Context, g *Gateway, m T) (T, bool) {
	c := callerOf(ctx, m.GetName())
	owns := c.User != "" && c.User == m.GetUser()
	if c.Admin || owns {
		return m, true
	}
	if g.opt.PrivateJobs {
		var zero T
		return zero, false
	}
	out := proto.Clone(m).(T)
	stripEnv(out)
	return out, true
}

// trainingHidden is the answer for a resource the caller may not see: the
// same as for one that does not exist (marked errs.Hide for the audit).
func trainingHidden(name string) error { return errs.Hide(fmt.Errorf("%s: %w", name, errs.NotFound)) }

// stripEnv removes every replica environment from m (in place).
func stripEnv(m proto.Message) {
	switch r := m.(type) {
	case *trainingv1.CustomJob:
		stripSpecEnv(r.GetJobSpec())
	case *trainingv1.HyperparameterTuningJob:
		stripSpecEnv(r.GetTrialJobSpec())
	case *trainingv1.TrainingPipeline:
		stripValueEnv(r.GetTrainingTaskInputs())
	}
}

func stripSpecEnv(s *trainingv1.CustomJobSpec) {
	for _, p := range s.GetWorkerPoolSpecs() {
		if c := p.GetContainerSpec(); c != nil {
			c.Env = nil
		}
		if pp := p.GetPythonPackageSpec(); pp != nil {
			pp.Env = nil
		}
	}
}

// stripValueEnv removes "env" from every container or package spec in a
// pipeline's task inputs (JSON, either spelling).
func stripValueEnv(v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		for name, f := range k.StructValue.GetFields() {
			switch name {
			case "containerSpec", "container_spec", "pythonPackageSpec", "python_package_spec":
				delete(f.GetStructValue().GetFields(), "env")
			}
			stripValueEnv(f)
		}
	case *structpb.Value_ListValue:
		for _, x := range k.ListValue.GetValues() {
			stripValueEnv(x)
		}
	}
}
