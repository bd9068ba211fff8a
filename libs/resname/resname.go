// Package resname parses and formats Loom's resource names, the one place
// that knows their shapes:
//
//	projects/{project}
//	projects/{project}/clusters/{cluster}
//	projects/{project}/clusters/{cluster}/nodes/{host}
//	projects/{project}/reservations/{reservation}
//	projects/{project}/jobs/{job}                      job: "12", or array task "12_3"
//	projects/{project}/jobs/{job}/steps/{step}
//	projects/{project}/models/{model}
//	projects/{project}/models/{model}/versions/{version}
//	projects/{project}/operations/{operation}
//
// Each shape has a type whose String formats it and two parsers:
//
//   - Parse* check every id against its kind's grammar (ValidID for project,
//     cluster, host, reservation and model ids; slurmspec.ParseJobRef for job
//     ids; a canonical number for steps and versions; an operation id without
//     spaces). It is what the public API accepts, and a parsed name formats
//     back to exactly the input.
//   - Split* check only the shape: the collection words where they belong,
//     the number of segments, no empty segment (steps and versions must still
//     be numbers, to be typed). They are for names a service reads back from
//     its own state or gets from another Loom service, and for the internal
//     read APIs, which have always taken any such name (the gateway in front
//     of them checks with Parse*).
//
// A refused name gives an *Error naming the segment at fault; it is an
// InvalidArgument for libs/errs. Callers that answer a request name the
// field: errs.Invalid("parent", "%v", err).
package resname

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
)

// Wildcard is the id of a collection parent that means "every one": the
// cluster of "projects/p/clusters/-" (ListNodes over a project's clusters),
// and the project of "projects/-" for the internal List APIs.
const Wildcard = "-"

// IDPattern is the grammar of project, cluster, host, reservation and model
// ids (and of node pool ids): a DNS label that starts with a letter
// (CONTRACTS.md). Error messages quote it.
const IDPattern = `^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`

var idPattern = regexp.MustCompile(IDPattern)

// MaxIDLen is the most characters an id of IDPattern has.
const MaxIDLen = 63

// ValidID reports whether id can be a project, cluster, host, reservation or
// model id: a lowercase letter, then up to 62 lowercase letters, digits or
// hyphens, not ending in a hyphen.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Project is "projects/{ID}".
type Project struct{ ID string }

// String formats the name.
func (p Project) String() string { return "projects/" + p.ID }

// Cluster is "projects/{Project}/clusters/{ID}".
type Cluster struct{ Project, ID string }

// String formats the name.
func (c Cluster) String() string { return "projects/" + c.Project + "/clusters/" + c.ID }

// Parent is the cluster's project.
func (c Cluster) Parent() Project { return Project{c.Project} }

// Node is "projects/{p}/clusters/{c}/nodes/{Host}".
type Node struct {
	Cluster Cluster
	Host    string
}

// String formats the name.
func (n Node) String() string { return NodeIn(n.Cluster.String(), n.Host) }

// NodeIn formats the name of node host of the cluster named cluster (a
// Cluster's String): for callers that hold the cluster's name, not its parts.
func NodeIn(cluster, host string) string { return cluster + "/nodes/" + host }

// Reservation is "projects/{Project}/reservations/{ID}".
type Reservation struct{ Project, ID string }

// String formats the name.
func (r Reservation) String() string { return "projects/" + r.Project + "/reservations/" + r.ID }

// Job is "projects/{Project}/jobs/{ID}": ID is a job id "12" or an array
// task "12_3" (Ref parses it).
type Job struct{ Project, ID string }

// JobOf is the name of job id in project.
func JobOf(project string, id int64) Job { return Job{project, strconv.FormatInt(id, 10)} }

// JobRefOf is the name of a job reference in project: "…/jobs/12" or, for an
// array task, "…/jobs/12_3".
func JobRefOf(project string, ref slurmspec.JobRef) Job { return Job{project, ref.String()} }

// String formats the name.
func (j Job) String() string { return "projects/" + j.Project + "/jobs/" + j.ID }

// Ref parses the job id; it cannot fail for a Job from ParseJob.
func (j Job) Ref() (slurmspec.JobRef, error) { return slurmspec.ParseJobRef(j.ID) }

// Step is "projects/{p}/jobs/{j}/steps/{ID}".
type Step struct {
	Job Job
	ID  int32
}

// String formats the name.
func (s Step) String() string { return StepIn(s.Job.String(), s.ID) }

// StepIn formats the name of step id of the job named job (a Job's String):
// for callers that hold the job's name, not its parts.
func StepIn(job string, id int32) string { return job + "/steps/" + strconv.FormatInt(int64(id), 10) }

// Model is "projects/{Project}/models/{ID}".
type Model struct{ Project, ID string }

// String formats the name.
func (m Model) String() string { return "projects/" + m.Project + "/models/" + m.ID }

// ModelVersion is "projects/{p}/models/{m}/versions/{Version}".
type ModelVersion struct {
	Model   Model
	Version int64
}

// String formats the name.
func (v ModelVersion) String() string { return VersionIn(v.Model.String(), v.Version) }

// APIName is the version's name as the model API answers it, in location
// (Vertex's form): "projects/{p}/locations/{location}/models/{m}@{Version}".
// The registry stores the version as String names it, which the model API
// does not take; what a user is shown to paste back is this one.
func (v ModelVersion) APIName(location string) string {
	return "projects/" + v.Model.Project + "/locations/" + location + "/models/" + v.Model.ID + "@" + strconv.FormatInt(v.Version, 10)
}

// VersionIn formats the name of version n of the model named model (a
// Model's String).
func VersionIn(model string, n int64) string { return model + "/versions/" + strconv.FormatInt(n, 10) }

// Operation is "projects/{Project}/operations/{ID}".
type Operation struct{ Project, ID string }

// String formats the name.
func (o Operation) String() string { return "projects/" + o.Project + "/operations/" + o.ID }

// Error is a name refused by a parser: the shape wanted, and what is wrong
// with which segment.
type Error struct {
	// Name is the name as given.
	Name string
	// Form is the shape wanted, e.g. "projects/{project}/clusters/{cluster}".
	Form string
	// Segment is the part at fault: a placeholder of Form ("{cluster}"), a
	// collection word ("clusters"), or "" when the number of segments is wrong.
	Segment string
	// Reason says what is wrong with it.
	Reason string
}

// Error says the form wanted, the name (clipped to 64 bytes: an error never
// echoes megabytes of a refused value) and what is wrong.
func (e *Error) Error() string {
	return fmt.Sprintf("want %s, got %s: %s", e.Form, clip(e.Name), e.Reason)
}

// As makes an *Error an *errs.InvalidError (InvalidArgument) for field
// "name"; a caller answering a request for another field wraps it:
// errs.Invalid("parent", "%v", err).
func (e *Error) As(target any) bool {
	p, ok := target.(**errs.InvalidError)
	if ok {
		*p = &errs.InvalidError{Violations: []errs.FieldViolation{{Field: "name", Reason: e.Error()}}}
	}
	return ok
}

// clip quotes s, cut to its first 64 bytes (on a rune boundary).
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

// kind is what a segment of a form holds: a collection word or an id.
type kind int

const (
	word kind = iota
	dnsID
	jobID
	stepID
	versionID
	operationID
	clusterOrAll // a cluster id or Wildcard
)

type segment struct {
	kind kind
	text string // the word, or the placeholder ("{cluster}")
}

// form is a name's shape, segment by segment.
type form struct {
	text string
	segs []segment
}

func newForm(text string) form {
	f := form{text: text}
	for _, s := range strings.Split(text, "/") {
		switch s {
		case "{project}", "{cluster}", "{host}", "{reservation}", "{model}":
			f.segs = append(f.segs, segment{dnsID, s})
		case "{cluster|-}":
			f.segs = append(f.segs, segment{clusterOrAll, "{cluster}"})
		case "{job}":
			f.segs = append(f.segs, segment{jobID, s})
		case "{step}":
			f.segs = append(f.segs, segment{stepID, s})
		case "{version}":
			f.segs = append(f.segs, segment{versionID, s})
		case "{operation}":
			f.segs = append(f.segs, segment{operationID, s})
		default:
			f.segs = append(f.segs, segment{word, s})
		}
	}
	return f
}

var (
	projectForm       = newForm("projects/{project}")
	clusterForm       = newForm("projects/{project}/clusters/{cluster}")
	clusterParentForm = newForm("projects/{project}/clusters/{cluster|-}")
	nodeForm          = newForm("projects/{project}/clusters/{cluster}/nodes/{host}")
	reservationForm   = newForm("projects/{project}/reservations/{reservation}")
	jobForm           = newForm("projects/{project}/jobs/{job}")
	stepForm          = newForm("projects/{project}/jobs/{job}/steps/{step}")
	modelForm         = newForm("projects/{project}/models/{model}")
	versionForm       = newForm("projects/{project}/models/{model}/versions/{version}")
	operationForm     = newForm("projects/{project}/operations/{operation}")
)

// maxSegments is the most segments a form has.
const maxSegments = 6

// match splits name by f; strict checks each id's grammar, else only that it
// is not empty (and that a step or version is a number). It returns the
// segments of name. It allocates nothing for a name it accepts: the
// scheduler splits node names on its event path.
func match(name string, f form, strict bool) (parts [maxSegments]string, err error) {
	fail := func(seg, reason string, args ...any) ([maxSegments]string, error) {
		return [maxSegments]string{}, &Error{Name: name, Form: f.text, Segment: seg, Reason: fmt.Sprintf(reason, args...)}
	}
	n, rest := 0, name
	for more := true; more; n++ {
		if n == maxSegments {
			return fail("", "it has %d segments, want %d", strings.Count(name, "/")+1, len(f.segs))
		}
		parts[n], rest, more = strings.Cut(rest, "/")
	}
	if n != len(f.segs) {
		return fail("", "it has %d segments, want %d", n, len(f.segs))
	}
	for i, s := range f.segs {
		p := parts[i]
		if s.kind == word {
			if p != s.text {
				return fail(s.text, "segment %d is %s, want %q", i+1, clip(p), s.text)
			}
			continue
		}
		if p == "" {
			return fail(s.text, "%s is empty", s.text)
		}
		if ok, why := check(s.kind, p, strict); !ok {
			if (s.kind == dnsID || s.kind == clusterOrAll) && utf8.RuneCountInString(p) > MaxIDLen {
				// Its length is what is wrong, and the limit what
				// helps; the name, clipped, is in the message already.
				return fail(s.text, "%s is %d characters, more than the %d an id takes", s.text, utf8.RuneCountInString(p), MaxIDLen)
			}
			return fail(s.text, "%s %s is not %s", s.text, clip(p), why)
		}
	}
	return parts, nil
}

// check reports whether p is a valid segment of kind k, and if not, what
// it should be.
func check(k kind, p string, strict bool) (ok bool, want string) {
	switch k {
	case stepID:
		return numeric(p, 31, strict), "a step number (0, 1, …)"
	case versionID:
		n, ok := numericValue(p, 63, strict)
		return ok && n >= 1, "a version number (1, 2, …)"
	}
	if !strict {
		return true, ""
	}
	switch k {
	case dnsID:
		return ValidID(p), "an id" + dnsReason
	case clusterOrAll:
		return p == Wildcard || ValidID(p), "an id or -" + dnsReason
	case jobID:
		_, err := slurmspec.ParseJobRef(p)
		return err == nil, "a job id N or an array task N_I (N ≥ 1, no leading zeros)"
	case operationID:
		return !strings.Contains(p, " "), "an operation id (no spaces)"
	}
	return true, ""
}

const dnsReason = " (a lowercase letter, then up to 62 lowercase letters, digits or hyphens, not ending in a hyphen)"

// numeric reports whether s is a decimal number that fits in bits bits
// (unsigned); strict also refuses leading zeros, so that it formats back
// the same.
func numeric(s string, bits int, strict bool) bool {
	_, ok := numericValue(s, bits, strict)
	return ok
}

func numericValue(s string, bits int, strict bool) (int64, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	if strict && len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, bits+1)
	return n, err == nil
}

// ParseProject parses "projects/{project}" (not "projects/-").
func ParseProject(name string) (Project, error) { return project(name, true) }

// SplitProject splits "projects/{project}" by shape only ("projects/-" too).
func SplitProject(name string) (Project, error) { return project(name, false) }

func project(name string, strict bool) (Project, error) {
	p, err := match(name, projectForm, strict)
	if err != nil {
		return Project{}, err
	}
	return Project{p[1]}, nil
}

// ParseCluster parses "projects/{project}/clusters/{cluster}".
func ParseCluster(name string) (Cluster, error) { return cluster(name, clusterForm, true) }

// ParseClusterParent parses the parent of a list of nodes:
// "projects/{project}/clusters/{cluster}", or "projects/{project}/clusters/-"
// for every cluster of the project (ID is then Wildcard).
func ParseClusterParent(name string) (Cluster, error) {
	return cluster(name, clusterParentForm, true)
}

// SplitCluster splits "projects/{project}/clusters/{cluster}" by shape only
// (either id may be "-").
func SplitCluster(name string) (Cluster, error) { return cluster(name, clusterForm, false) }

func cluster(name string, f form, strict bool) (Cluster, error) {
	p, err := match(name, f, strict)
	if err != nil {
		return Cluster{}, err
	}
	return Cluster{p[1], p[3]}, nil
}

// ParseNode parses "projects/{project}/clusters/{cluster}/nodes/{host}".
func ParseNode(name string) (Node, error) { return node(name, true) }

// SplitNode splits "projects/{project}/clusters/{cluster}/nodes/{host}" by
// shape only.
func SplitNode(name string) (Node, error) { return node(name, false) }

func node(name string, strict bool) (Node, error) {
	p, err := match(name, nodeForm, strict)
	if err != nil {
		return Node{}, err
	}
	return Node{Cluster{p[1], p[3]}, p[5]}, nil
}

// ParseReservation parses "projects/{project}/reservations/{reservation}".
func ParseReservation(name string) (Reservation, error) { return reservation(name, true) }

// SplitReservation splits "projects/{project}/reservations/{reservation}" by
// shape only.
func SplitReservation(name string) (Reservation, error) { return reservation(name, false) }

func reservation(name string, strict bool) (Reservation, error) {
	p, err := match(name, reservationForm, strict)
	if err != nil {
		return Reservation{}, err
	}
	return Reservation{p[1], p[3]}, nil
}

// ParseJob parses "projects/{project}/jobs/{job}", job a job id "12" or an
// array task "12_3" (slurmspec.ParseJobRef).
func ParseJob(name string) (Job, error) { return job(name, true) }

// SplitJob splits "projects/{project}/jobs/{job}" by shape only (any
// non-empty job id).
func SplitJob(name string) (Job, error) { return job(name, false) }

func job(name string, strict bool) (Job, error) {
	p, err := match(name, jobForm, strict)
	if err != nil {
		return Job{}, err
	}
	return Job{p[1], p[3]}, nil
}

// ParseStep parses "projects/{project}/jobs/{job}/steps/{step}", step a
// number 0..2^31-1 without leading zeros.
func ParseStep(name string) (Step, error) { return step(name, true) }

// SplitStep splits "projects/{project}/jobs/{job}/steps/{step}" by shape
// only; step must still be a number 0..2^31-1 (leading zeros allowed).
func SplitStep(name string) (Step, error) { return step(name, false) }

func step(name string, strict bool) (Step, error) {
	p, err := match(name, stepForm, strict)
	if err != nil {
		return Step{}, err
	}
	n, _ := strconv.ParseInt(p[5], 10, 32) // match checked it
	return Step{Job{p[1], p[3]}, int32(n)}, nil
}

// ParseModel parses "projects/{project}/models/{model}".
func ParseModel(name string) (Model, error) { return model(name, true) }

// SplitModel splits "projects/{project}/models/{model}" by shape only.
func SplitModel(name string) (Model, error) { return model(name, false) }

func model(name string, strict bool) (Model, error) {
	p, err := match(name, modelForm, strict)
	if err != nil {
		return Model{}, err
	}
	return Model{p[1], p[3]}, nil
}

// ParseModelVersion parses "projects/{project}/models/{model}/versions/{version}",
// version a number ≥ 1 without leading zeros.
func ParseModelVersion(name string) (ModelVersion, error) { return modelVersion(name, true) }

// SplitModelVersion splits "projects/{project}/models/{model}/versions/{version}"
// by shape only; version must still be a number ≥ 1 (leading zeros allowed).
func SplitModelVersion(name string) (ModelVersion, error) { return modelVersion(name, false) }

func modelVersion(name string, strict bool) (ModelVersion, error) {
	p, err := match(name, versionForm, strict)
	if err != nil {
		return ModelVersion{}, err
	}
	n, _ := strconv.ParseInt(p[5], 10, 64) // match checked it
	return ModelVersion{Model{p[1], p[3]}, n}, nil
}

// ParseOperation parses "projects/{project}/operations/{operation}", the
// operation id any non-empty string without "/" or spaces.
func ParseOperation(name string) (Operation, error) { return operation(name, true) }

// SplitOperation splits "projects/{project}/operations/{operation}" by shape
// only.
func SplitOperation(name string) (Operation, error) { return operation(name, false) }

func operation(name string, strict bool) (Operation, error) {
	p, err := match(name, operationForm, strict)
	if err != nil {
		return Operation{}, err
	}
	return Operation{p[1], p[3]}, nil
}
