// Package auth is Loom's trust model in code: who a caller is (Principal),
// what role it holds in a project (Role), and the credentials that prove it
// (API keys, signed tokens, node certificates). It holds no I/O beyond key
// files: the gateway stores keys and members, and calls into this package to
// mint and check credentials.
package auth

import (
	"context"
	"fmt"
	"strings"
)

// Kind is what sort of caller a principal is.
type Kind uint8

// Kinds of principal.
const (
	// KindUser is a person (or their script) with an API key, token or
	// OIDC identity; also a login node's OS user, vouched for by the login
	// daemon.
	KindUser Kind = iota + 1
	// KindNode is a node's agent, with a node identity.
	KindNode
	// KindWorkload is a job attempt's processes, with the token its agent
	// handed them: it may act on that job only.
	KindWorkload
	// KindService is a Loom service, or the login daemon.
	KindService
)

// String is the kind's lower-case name ("user", "node", ...).
func (k Kind) String() string {
	switch k {
	case KindUser:
		return "user"
	case KindNode:
		return "node"
	case KindWorkload:
		return "workload"
	case KindService:
		return "service"
	}
	return "unknown"
}

// ParseKind is String's inverse.
func ParseKind(s string) (Kind, error) {
	for k := KindUser; k <= KindService; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown principal kind %q (want user, node, workload or service)", s)
}

// Role is a user's standing in a project. Each role includes the ones
// below it: viewer ⊂ user ⊂ admin, as Vertex's aiplatform.viewer ⊂ user ⊂
// admin.
type Role uint8

// Roles, weakest first.
const (
	// RoleNone: not a member; the project's resources do not exist for them.
	RoleNone Role = iota
	// RoleViewer gets, lists, watches and reads the logs of what the
	// project may see.
	RoleViewer
	// RoleUser also submits jobs, and cancels, holds and updates their own.
	RoleUser
	// RoleAdmin does everything in the project, other users' jobs, members
	// and keys included.
	RoleAdmin
)

// String is the role's name as the API and CLI spell it ("" for none).
func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleUser:
		return "user"
	case RoleAdmin:
		return "admin"
	}
	return ""
}

// ParseRole reads "viewer", "user" or "admin" ("" is RoleNone).
func ParseRole(s string) (Role, error) {
	switch strings.TrimSpace(s) {
	case "":
		return RoleNone, nil
	case "viewer":
		return RoleViewer, nil
	case "user":
		return RoleUser, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("unknown role %q (want viewer, user or admin)", s)
}

// Principal is an authenticated caller. Only the gateway's authentication
// makes one, from a verified credential; nothing in a request sets it.
type Principal struct {
	// Name is "users/{user}", "nodes/{node}", "jobs/{project}/{job id}" or
	// "services/{service}": what the audit trail records.
	Name string
	Kind Kind
	// User is the OS account: a user's own name, a workload's job owner.
	User string
	// ClusterAdmin may act on nodes, capacity, reservations and every
	// project (Slurm's AdminLevel=Administrator).
	ClusterAdmin bool
	// Roles is a user's role per project.
	Roles map[string]Role
	// Project and Job are what a workload may act on.
	Project, Job string
	// Node, Cluster and Pool are a node's identity.
	Node, Cluster, Pool string
	// How names the credential that proved it: "api-key", "token", "oidc",
	// "node-identity", "dev" (authentication turned off).
	How string
	// KeyID is, for a user, the id of the API key that proved it, or that
	// the session its token belongs to started from ("" for none): what
	// revoking that key ends.
	KeyID string
	// Registration is, for a node, the registration its identity belongs
	// to (Claims.Reg; "" for an identity made without one).
	Registration string
}

// Role is p's role in project: admin everywhere for a cluster
// administrator, RoleNone for nil and for principals that are not users.
func (p *Principal) Role(project string) Role {
	if p == nil {
		return RoleNone
	}
	if p.ClusterAdmin {
		return RoleAdmin
	}
	if p.Kind != KindUser {
		return RoleNone
	}
	return p.Roles[project]
}

// InProject reports whether p has standing in project: a cluster
// administrator or a service anywhere, a user with a role there, a
// workload of one of its jobs, a node of one of its clusters. The audit
// trail files a refusal under the project it names only for such a caller:
// a stranger's refusals must not push a project's own records out of its
// trail, nor make a trail for any project name it likes.
func (p *Principal) InProject(project string) bool {
	if p == nil || project == "" {
		return false
	}
	switch {
	case p.ClusterAdmin || p.Kind == KindService:
		return true
	case p.Kind == KindUser:
		return p.Roles[project] != RoleNone
	case p.Kind == KindWorkload:
		return p.Project == project
	case p.Kind == KindNode:
		return strings.HasPrefix(p.Cluster, "projects/"+project+"/")
	}
	return false
}

// UserName is "users/{user}", a user principal's Name.
func UserName(user string) string { return "users/" + user }

// NodeName is "nodes/{node}", a node principal's Name.
func NodeName(node string) string { return "nodes/" + node }

// ServiceName is "services/{service}", a service principal's Name.
func ServiceName(service string) string { return "services/" + service }

// WorkloadName is "jobs/{project}/{job id}", a workload principal's Name.
func WorkloadName(project, jobID string) string { return "jobs/" + project + "/" + jobID }

type ctxKey struct{}

type slotKey struct{}

// Slot lets an interceptor that runs before authentication (the audit
// trail) learn the principal that authentication found: it puts a Slot in
// the context with WithSlot, and NewContext fills it.
type Slot struct{ Principal *Principal }

// WithSlot returns ctx with an empty Slot that a later NewContext on a
// context derived from it fills.
func WithSlot(ctx context.Context) (context.Context, *Slot) {
	s := &Slot{}
	return context.WithValue(ctx, slotKey{}, s), s
}

// NewContext returns ctx carrying p: the gateway's authentication does
// this once per call, after verifying the call's credential. It also fills
// the Slot of ctx, if any.
func NewContext(ctx context.Context, p *Principal) context.Context {
	if s, ok := ctx.Value(slotKey{}).(*Slot); ok && s != nil {
		s.Principal = p
	}
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the call's principal; false when the call is
// unauthenticated (anonymous).
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(*Principal)
	return p, ok && p != nil
}
