package stack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestTrainingCreateThenGetAndCancel: through the gateway of `loom up`'s
// stack, a Get right after a create never answers NotFound (the gateway
// answers the accepted resource until the training service has read the
// create), and a cancel right after a create is not lost: the resource
// ends CANCELLED. CustomJobs and a tuning job, each created, read and
// cancelled without a pause.
func TestTrainingCreateThenGetAndCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole stack")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer st.Close(context.Background())
	key, err := st.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(st.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(key)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tc := trainingv1.NewTrainingServiceClient(conn)
	const parent = "projects/default/locations/local"
	spec := func() *trainingv1.CustomJobSpec {
		return &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{
			MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-8"}, ReplicaCount: 1,
			Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"sleep", "600"}}}}}}
	}

	var jobs []string
	for i := range 3 {
		j, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: parent,
			CustomJob: &trainingv1.CustomJob{DisplayName: fmt.Sprintf("ryw-%d", i), JobSpec: spec()}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		got, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: j.GetName()})
		if err != nil || got.GetName() != j.GetName() {
			t.Fatalf("get right after create of %s: %v, %v", j.GetName(), got, err)
		}
		if _, err := tc.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: j.GetName()}); err != nil {
			t.Fatalf("cancel right after create of %s: %v", j.GetName(), err)
		}
		jobs = append(jobs, j.GetName())
	}
	tj, err := tc.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: parent,
		HyperparameterTuningJob: &trainingv1.HyperparameterTuningJob{DisplayName: "ryw-tuning", MaxTrialCount: 2, ParallelTrialCount: 1,
			StudySpec: &trainingv1.StudySpec{
				Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
				Parameters: []*trainingv1.StudySpec_ParameterSpec{{ParameterId: "lr",
					ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 0.001, MaxValue: 0.1}}}},
			},
			TrialJobSpec: spec()}})
	if err != nil {
		t.Fatalf("create tuning job: %v", err)
	}
	if got, err := tc.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: tj.GetName()}); err != nil || got.GetName() != tj.GetName() {
		t.Fatalf("get right after create of %s: %v, %v", tj.GetName(), got, err)
	}
	if _, err := tc.CancelHyperparameterTuningJob(ctx, &trainingv1.CancelHyperparameterTuningJobRequest{Name: tj.GetName()}); err != nil {
		t.Fatalf("cancel right after create of %s: %v", tj.GetName(), err)
	}

	for _, name := range jobs {
		var last *trainingv1.CustomJob
		testkit.WaitFor(t, 2*time.Minute, name+" CANCELLED", func() (bool, error) {
			j, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
			if err != nil {
				return false, fmt.Errorf("get %s: %w", name, err)
			}
			last = j
			return j.GetState() == trainingv1.JobState_JOB_STATE_CANCELLED, nil
		})
		if last.GetError().GetMessage() == "" {
			t.Errorf("%s CANCELLED without an error saying why: %v", name, last)
		}
	}
	testkit.WaitFor(t, 2*time.Minute, tj.GetName()+" CANCELLED", func() (bool, error) {
		j, err := tc.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: tj.GetName()})
		if err != nil {
			return false, fmt.Errorf("get %s: %w", tj.GetName(), err)
		}
		return j.GetState() == trainingv1.JobState_JOB_STATE_CANCELLED, nil
	})
}
