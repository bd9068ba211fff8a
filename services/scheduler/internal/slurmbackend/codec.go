package slurmbackend

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// stored is a record as KeyJobs holds it: JSON around the job's protobuf.
type stored struct {
	SlurmID string `json:"slurm_id,omitempty"`
	Tried   bool   `json:"tried,omitempty"`
	Job     []byte `json:"job"`
}

func encode(r *record) ([]byte, error) {
	jb, err := proto.Marshal(r.job)
	if err != nil {
		return nil, err
	}
	return json.Marshal(stored{SlurmID: r.slurmID, Tried: r.tried, Job: jb})
}

func decode(v []byte) (*record, error) {
	var s stored
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, err
	}
	j := &loomv1.Job{}
	if err := proto.Unmarshal(s.Job, j); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	return &record{job: j, slurmID: s.SlurmID, tried: s.Tried}, nil
}
