package trainingspec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestGuideExamplesAreValid: the first JSON example of each resource's
// section of docs/training.md decodes and validates, so that the guide
// never shows a file Loom refuses.
func TestGuideExamplesAreValid(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range []struct {
		section  string
		msg      proto.Message
		validate func(proto.Message) error
	}{
		{"## CustomJob", &trainingv1.CustomJob{}, func(m proto.Message) error { return ValidateCustomJob(m.(*trainingv1.CustomJob)) }},
		{"## Tuning jobs", &trainingv1.HyperparameterTuningJob{}, func(m proto.Message) error {
			return ValidateHyperparameterTuningJob(m.(*trainingv1.HyperparameterTuningJob))
		}},
		{"## Pipelines", &trainingv1.TrainingPipeline{}, func(m proto.Message) error {
			return ValidateTrainingPipeline(m.(*trainingv1.TrainingPipeline))
		}},
	} {
		i := strings.Index(doc, "\n"+c.section+"\n")
		if i < 0 {
			t.Fatalf("docs/training.md has no %q section", c.section)
		}
		rest := doc[i:]
		j := strings.Index(rest, "```json\n")
		if j < 0 {
			t.Fatalf("%s has no JSON example", c.section)
		}
		body := rest[j+len("```json\n"):]
		body = body[:strings.Index(body, "```")]
		if err := protojson.Unmarshal([]byte(body), c.msg); err != nil {
			t.Errorf("%s example does not decode: %v", c.section, err)
			continue
		}
		if err := c.validate(c.msg); err != nil {
			t.Errorf("%s example is refused: %v", c.section, err)
		}
	}
}

// TestExamplesAreValid: the example files of examples/training decode
// and validate.
func TestExamplesAreValid(t *testing.T) {
	t.Parallel()
	for file, m := range map[string]proto.Message{
		"custom_job.json": &trainingv1.CustomJob{}, "tuning_job.json": &trainingv1.HyperparameterTuningJob{},
		"pipeline.json": &trainingv1.TrainingPipeline{},
	} {
		b, err := os.ReadFile(filepath.Join("../../examples/training", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(b, m); err != nil {
			t.Errorf("%s does not decode: %v", file, err)
			continue
		}
		switch r := m.(type) {
		case *trainingv1.CustomJob:
			err = ValidateCustomJob(r)
		case *trainingv1.HyperparameterTuningJob:
			err = ValidateHyperparameterTuningJob(r)
		case *trainingv1.TrainingPipeline:
			err = ValidateTrainingPipeline(r)
		}
		if err != nil {
			t.Errorf("%s is refused: %v", file, err)
		}
	}
}

// TestTuningExamplesEndASHAAtTheLastEpoch: a tuning example that stops
// trials with ASHA sets maxStepCount to the --epochs its trainer runs.
// Without it ASHA cannot tell a trial's last measurement from any other
// and may stop the trial on it, which saves nothing (libs/hpo's
// TestASHANotAtTheLastStep); docs/training.md's example and
// examples/training/tuning_job.json set none.
func TestTuningExamplesEndASHAAtTheLastEpoch(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Tuning jobs\n")
	if !ok {
		t.Fatal(`docs/training.md has no "## Tuning jobs" section`)
	}
	_, body, ok := strings.Cut(section, "```json\n")
	if !ok {
		t.Fatal("## Tuning jobs has no JSON example")
	}
	body, _, _ = strings.Cut(body, "```")
	file, err := os.ReadFile("../../examples/training/tuning_job.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"docs/training.md's tuning example": body, "examples/training/tuning_job.json": string(file)} {
		var job trainingv1.HyperparameterTuningJob
		if err := protojson.Unmarshal([]byte(text), &job); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		asha := job.GetStudySpec().GetAshaStoppingSpec()
		if asha == nil {
			t.Errorf("%s stops trials without ASHA: this test no longer checks it", name)
			continue
		}
		epochs := ""
		for _, p := range job.GetTrialJobSpec().GetWorkerPoolSpecs() {
			for _, a := range append(p.GetContainerSpec().GetCommand(), p.GetContainerSpec().GetArgs()...) {
				if v, ok := strings.CutPrefix(a, "--epochs="); ok {
					epochs = v
				}
			}
		}
		if epochs == "" {
			t.Errorf("%s: no --epochs=N in its trials' command", name)
		} else if got := strconv.FormatInt(asha.GetMaxStepCount(), 10); got != epochs {
			t.Errorf("%s: ashaStoppingSpec.maxStepCount is %s, want %s, the --epochs its trials run (ASHA may stop a trial on its last epoch otherwise)", name, got, epochs)
		}
	}
}

// TestLimitsDocStatesBounds: the Limits table of docs/training.md, the
// contract these bounds keep (the gateway refuses past them), states each
// one as it is here: a bound changed without the guide fails.
func TestLimitsDocStatesBounds(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Limits\n")
	if !ok {
		t.Fatal(`docs/training.md has no "## Limits" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	// thousands writes n as the guide does: 1,000.
	thousands := func(n int) string {
		s := strconv.Itoa(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	for _, row := range []string{
		"| worker pools | " + thousands(MaxWorkerPools) + " ",
		"| replicas of one pool | " + thousands(MaxReplicaCount) + " |",
		"| `command`, `args` (each) | " + thousands(MaxArgs) + " items, " + thousands(MaxArgBytes>>10) + " KiB each,",
		"| `env` | " + thousands(MaxEnv) + " variables,",
		"| the whole resource, encoded | " + thousands(MaxSpecBytes>>10) + " KiB |",
		"| `maxTrialCount` | 1 to " + thousands(MaxTrialCount) + " |",
		"| `parallelTrialCount` | 1 to " + thousands(MaxParallelTrials) + ",",
		"| study parameters (conditional included) | " + thousands(MaxParameters) + " |",
		"| categorical or discrete values | " + thousands(MaxCategoricalValues) + " |",
		"| a categorical value | 1 to " + thousands(MaxCategoricalValueBytes) + " bytes",
		"| conditional parameter depth | " + thousands(MaxConditionalDepth) + " |",
		"| metrics | " + thousands(MaxMetrics) + " |",
		"| `displayName` | required, " + thousands(MaxDisplayNameLen) + " characters,",
		"| labels | " + thousands(MaxLabels) + ",",
		"| `packageUris` | " + thousands(MaxPackageURIs) + " |",
		"| URIs and paths | " + thousands(MaxURILen) + " bytes,",
	} {
		if !strings.Contains(section, "\n"+row) {
			t.Errorf("docs/training.md's Limits table has no row %q", row)
		}
	}
}

// TestPipelineExampleRunsKeepTheirOwnOutput: docs/training.md's pipeline
// example registers version 1, and the guide says how the next run makes
// version 2. A version's artifact_uri is its run's <prefix>/model, which
// the registry does not copy: the guide's example wrote every run to one
// baseOutputDirectory, so version 2's run overwrote version 1's files
// (and the registry marked version 1 changed, never to be exported). The
// section now shows both runs, each valid, the second a version of the
// first's model, with its own outputUriPrefix.
func TestPipelineExampleRunsKeepTheirOwnOutput(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Pipelines\n")
	if !ok {
		t.Fatal(`docs/training.md has no "## Pipelines" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var runs []*trainingv1.TrainingPipeline
	for rest := section; ; {
		var body string
		if _, rest, ok = strings.Cut(rest, "```json\n"); !ok {
			break
		}
		body, rest, _ = strings.Cut(rest, "```")
		p := &trainingv1.TrainingPipeline{}
		if err := protojson.Unmarshal([]byte(body), p); err != nil {
			t.Fatalf("a pipeline example does not decode: %v\n%s", err, body)
		}
		if err := ValidateTrainingPipeline(p); err != nil {
			t.Fatalf("a pipeline example is refused: %v\n%s", err, body)
		}
		runs = append(runs, p)
	}
	if len(runs) != 2 {
		t.Fatalf("## Pipelines has %d JSON examples; want 2: the first run and the next (version 2)", len(runs))
	}
	prefix := func(p *trainingv1.TrainingPipeline) string {
		return p.GetTrainingTaskInputs().GetStructValue().GetFields()["baseOutputDirectory"].GetStructValue().GetFields()["outputUriPrefix"].GetStringValue()
	}
	first, next := runs[0], runs[1]
	if want := "projects/default/models/" + first.GetModelToUpload().GetDisplayName(); next.GetParentModel() != want {
		t.Errorf("the next run's parentModel is %q; want %q, the first run's model", next.GetParentModel(), want)
	}
	if a, b := prefix(first), prefix(next); a == "" || a == b {
		t.Errorf("the runs' outputUriPrefix: %q and %q; want each its own (version 2's run would overwrite version 1's files)", a, b)
	}
}
