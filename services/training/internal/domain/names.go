package domain

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/resname"
)

// Collections of the training resources' names, and the prefix of a
// CustomJob's ephemeral cluster id.
const (
	// CustomJobs is the collection of CustomJobs.
	CustomJobs = "customJobs"
	// TuningJobs is the collection of hyperparameter tuning jobs.
	TuningJobs = "hyperparameterTuningJobs"
	// Pipelines is the collection of training pipelines.
	Pipelines = "trainingPipelines"
	// ClusterPrefix prefixes an ephemeral cluster's id: "cj-{id}".
	ClusterPrefix = "cj-"
)

// Name is a parsed training resource name:
// "projects/{Project}/locations/{Location}/{Collection}/{ID}", ID numeric.
type Name struct {
	Project, Location, Collection string
	ID                            int64
}

// String formats the name.
func (n Name) String() string {
	return "projects/" + n.Project + "/locations/" + n.Location + "/" + n.Collection + "/" + strconv.FormatInt(n.ID, 10)
}

// With returns the name of resource id in collection, in n's project and location.
func (n Name) With(collection string, id int64) Name {
	return Name{Project: n.Project, Location: n.Location, Collection: collection, ID: id}
}

// Job is the scheduler job of the CustomJob n: "projects/{p}/jobs/{id}".
func (n Name) Job() string { return resname.JobOf(n.Project, n.ID).String() }

// EphemeralCluster is the cluster a CustomJob without
// persistent_resource_id runs on: "projects/{p}/clusters/cj-{id}".
func (n Name) EphemeralCluster() string {
	return resname.Cluster{Project: n.Project, ID: ClusterPrefix + strconv.FormatInt(n.ID, 10)}.String()
}

// ParseName parses a training resource name of collection want ("" for any
// of the three), with a valid project and location and a positive numeric id.
func ParseName(s, want string) (Name, error) {
	p := strings.Split(s, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "locations" {
		return Name{}, fmt.Errorf("%q is not projects/{p}/locations/{l}/{collection}/{id}", s)
	}
	if !resname.ValidID(p[1]) || !resname.ValidID(p[3]) {
		return Name{}, fmt.Errorf("%q: bad project or location id", s)
	}
	switch p[4] {
	case CustomJobs, TuningJobs, Pipelines:
	default:
		return Name{}, fmt.Errorf("%q: unknown collection %q", s, p[4])
	}
	if want != "" && p[4] != want {
		return Name{}, fmt.Errorf("%q is not a %s name", s, want)
	}
	id, err := strconv.ParseInt(p[5], 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != p[5] {
		return Name{}, fmt.Errorf("%q: the id must be a positive job id", s)
	}
	return Name{Project: p[1], Location: p[3], Collection: p[4], ID: id}, nil
}

// ParseParent parses "projects/{p}/locations/{l}".
func ParseParent(s string) (project, location string, err error) {
	p := strings.Split(s, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "locations" || !resname.ValidID(p[1]) || !resname.ValidID(p[3]) {
		return "", "", fmt.Errorf("%q is not projects/{p}/locations/{l}", s)
	}
	return p[1], p[3], nil
}
