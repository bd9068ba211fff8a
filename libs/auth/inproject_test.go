package auth

import "testing"

// TestInProject: who has standing in a project, for the audit trail.
func TestInProject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		p    *Principal
		want bool
	}{
		{"nobody", nil, false},
		{"a cluster administrator", &Principal{Kind: KindUser, ClusterAdmin: true}, true},
		{"a service", &Principal{Kind: KindService}, true},
		{"a member", &Principal{Kind: KindUser, Roles: map[string]Role{"p": RoleViewer}}, true},
		{"a member elsewhere", &Principal{Kind: KindUser, Roles: map[string]Role{"q": RoleAdmin}}, false},
		{"a workload of p", &Principal{Kind: KindWorkload, Project: "p"}, true},
		{"a workload of q", &Principal{Kind: KindWorkload, Project: "q"}, false},
		{"a node of p", &Principal{Kind: KindNode, Cluster: "projects/p/clusters/c"}, true},
		{"a node of pp", &Principal{Kind: KindNode, Cluster: "projects/pp/clusters/c"}, false},
	} {
		if got := c.p.InProject("p"); got != c.want {
			t.Errorf("%s: InProject(p) = %v, want %v", c.name, got, c.want)
		}
	}
	if (&Principal{Kind: KindService}).InProject("") {
		t.Error(`InProject("") is true`)
	}
}
