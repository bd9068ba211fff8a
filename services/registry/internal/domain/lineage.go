package domain

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// RecordedByLoom is ModelLineage.recorded_by of a lineage Loom recorded
// from what ran: a training pipeline's upload (the training service) or a
// job's model output (the scheduler's event). Any other value is the
// principal that supplied the lineage with UploadModel, which the gateway
// stamps: that caller's word.
const RecordedByLoom = "loom"

// Collections of the training service's resource names that a lineage
// names (services/training: "projects/{p}/locations/{l}/{collection}/{id}").
const (
	customJobs        = "customJobs"
	trainingPipelines = "trainingPipelines"
	tuningJobs        = "hyperparameterTuningJobs"
)

// checkLineageNames checks that every resource a lineage names is a
// well-formed name of its kind in project, the project of the model the
// version is uploaded to, and that its parts agree (a trial of the tuning
// job named, job_id the job's id): an upload must not claim another
// project's job, pipeline or trial as its producer (a tester registered a
// version "produced by" projects/default's jobs from another project).
// It cannot check that they produced the model: that lineage is its
// uploader's word (recorded_by). The error names the field and the form
// wanted.
func checkLineageNames(l *loomv1.ModelLineage, project string) error {
	if j := l.GetJob(); j != "" {
		n, err := resname.ParseJob(j)
		if err != nil || n.Project != project {
			return fmt.Errorf("lineage.job: %q is not a job of project %s (projects/%s/jobs/{id})", Clip(j), project, project)
		}
		if id := l.GetJobId(); id != "" && id != n.ID {
			return fmt.Errorf("lineage.job_id: %q is not the id of lineage.job %s; leave it out (it is filled from lineage.job)", Clip(id), j)
		}
	} else if id := l.GetJobId(); id != "" {
		return fmt.Errorf("lineage.job_id: %q names no job; set lineage.job (projects/%s/jobs/{id}) instead", Clip(id), project)
	}
	for _, f := range []struct{ field, name, collection, kind string }{
		{"custom_job", l.GetCustomJob(), customJobs, "CustomJob"},
		{"training_pipeline", l.GetTrainingPipeline(), trainingPipelines, "training pipeline"},
		{"tuning_job", l.GetTuningJob(), tuningJobs, "hyperparameter tuning job"},
	} {
		if f.name == "" {
			continue
		}
		if !trainingName(f.name, project, f.collection) {
			return fmt.Errorf("lineage.%s: %q is not a %s of project %s (projects/%s/locations/{location}/%s/{id})",
				f.field, Clip(f.name), f.kind, project, project, f.collection)
		}
	}
	if tr := l.GetTrial(); tr != "" {
		job, id, _ := strings.Cut(tr, "/trials/")
		if !trainingName(job, project, tuningJobs) || !positiveID(id) {
			return fmt.Errorf("lineage.trial: %q is not a trial of project %s (projects/%s/locations/{location}/%s/{id}/trials/{trial})",
				Clip(tr), project, project, tuningJobs)
		}
		if tj := l.GetTuningJob(); tj != "" && tj != job {
			return fmt.Errorf("lineage.trial: %s is not a trial of lineage.tuning_job %s", tr, tj)
		}
	}
	return nil
}

// trainingName reports whether name is "projects/{project}/locations/
// {location}/{collection}/{id}", location an id and id a positive number:
// the training service's names.
func trainingName(name, project, collection string) bool {
	p := strings.Split(name, "/")
	return len(p) == 6 && p[0] == "projects" && p[1] == project && p[2] == "locations" &&
		resname.ValidID(p[3]) && p[4] == collection && positiveID(p[5])
}

// positiveID reports whether s is a positive decimal number without
// leading zeros that fits an int64 (a training resource's or a trial's id).
func positiveID(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n > 0 && strconv.FormatInt(n, 10) == s
}

// recordedLineage is the lineage a version registered from cmd keeps: a
// copy of cmd's, with recorded_by RecordedByLoom unless the gateway stamped
// the uploader's principal (a caller's upload). No lineage stays empty.
func recordedLineage(l *loomv1.ModelLineage) *loomv1.ModelLineage {
	if l == nil || proto.Size(l) == 0 {
		return &loomv1.ModelLineage{}
	}
	out := proto.Clone(l).(*loomv1.ModelLineage)
	if out.RecordedBy == "" {
		out.RecordedBy = RecordedByLoom
	}
	return out
}
