// Package domain is the gateway's pure core: resource names, request
// validation (cluster specs through libs/clusterspec, see spec.go), how an
// update merges into the current spec, the capacity pre-check, the accepted
// form of commands, and how cluster events finish operations. It does no
// I/O; the clock is passed in.
package domain

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// DefaultProject is the project used when a caller has no other.
const DefaultProject = "default"

// idPattern is the shape of project, cluster, model and node pool ids.
var idPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidID reports whether id can name a project, cluster or model.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ProjectName returns "projects/{project}".
func ProjectName(project string) string { return "projects/" + project }

// ClusterName returns "projects/{project}/clusters/{cluster}".
func ClusterName(project, cluster string) string {
	return ProjectName(project) + "/clusters/" + cluster
}

// JobName returns "projects/{project}/jobs/{id}".
func JobName(project string, id int64) string {
	return ProjectName(project) + "/jobs/" + strconv.FormatInt(id, 10)
}

// JobRefName returns "projects/{project}/jobs/{ref}": "…/jobs/12" or, for
// an array task, "…/jobs/12_3".
func JobRefName(project string, ref slurmspec.JobRef) string {
	return ProjectName(project) + "/jobs/" + ref.String()
}

// OperationName returns "projects/{project}/operations/{id}".
func OperationName(project, id string) string {
	return ProjectName(project) + "/operations/" + id
}

// split checks that name is "projects/{p}/{collection}/{id}" and returns p and id.
func split(name, collection string, validID func(string) bool) (project, id string, err error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != collection || !ValidID(parts[1]) || !validID(parts[3]) {
		return "", "", fmt.Errorf("want projects/{project}/%s/{id}, got %s", collection, clip(name))
	}
	return parts[1], parts[3], nil
}

// ParseProject returns the project of "projects/{project}".
func ParseProject(parent string) (string, error) {
	p, ok := strings.CutPrefix(parent, "projects/")
	if !ok || !ValidID(p) {
		return "", fmt.Errorf("want projects/{project}, got %s", clip(parent))
	}
	return p, nil
}

// ParseClusterName returns the project and cluster id of a cluster name.
func ParseClusterName(name string) (project, cluster string, err error) {
	return split(name, "clusters", ValidID)
}

// ParseOperationName returns the project and id of an operation name.
func ParseOperationName(name string) (project, id string, err error) {
	return split(name, "operations", func(id string) bool {
		return id != "" && !strings.ContainsAny(id, "/ ")
	})
}

// ParseNodesParent checks "projects/{p}/clusters/{c}" where c may be "-" (all clusters).
func ParseNodesParent(parent string) error {
	if strings.HasSuffix(parent, "/clusters/-") {
		_, err := ParseProject(strings.TrimSuffix(parent, "/clusters/-"))
		return err
	}
	_, _, err := ParseClusterName(parent)
	return err
}

// ParseModelName checks "projects/{p}/models/{m}".
func ParseModelName(name string) error {
	_, _, err := split(name, "models", ValidID)
	return err
}

// ReservationName returns "projects/{project}/reservations/{reservation}".
func ReservationName(project, reservation string) string {
	return ProjectName(project) + "/reservations/" + reservation
}

// ParseReservationName returns the project and id of a reservation name.
func ParseReservationName(name string) (project, reservation string, err error) {
	return split(name, "reservations", ValidID)
}
