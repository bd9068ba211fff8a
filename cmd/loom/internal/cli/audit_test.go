package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func auditGateway(t *testing.T) (*fakegw.Gateway, string) {
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(fakegw.TestNow.Add(-d)) }
	f := &fakegw.Gateway{AuditRecords: []*loomv1.AuditRecord{
		{Id: "3", Time: at(time.Minute), Principal: "users/ana", Method: "/loom.v1.JobService/SubmitJob",
			Resource: "projects/default", Decision: "allowed", Code: "OK", Project: "default"},
		{Id: "2", Time: at(time.Hour), Principal: "users/bob", Method: "/loom.v1.ClusterService/CreateCluster",
			Resource: "projects/default", Decision: "denied", Code: "ResourceExhausted", Project: "default",
			Reason: "project default: 17 nodes would exceed the quota of 16 nodes (LOOM_GATEWAY_QUOTA_NODES): 12 in its other clusters, 5 in c2"},
		{Id: "1", Time: at(2 * time.Hour), Principal: "anonymous", Method: "/loom.v1.JobService/CancelJob",
			Resource: "projects/other/jobs/4", Decision: "denied", Code: "Unauthenticated", Project: "other",
			Reason: "from 10.0.0.9: no credential;\x1b[2J the call needs one"},
	}}
	return f, f.Serve(t)
}

func TestAuditCommand(t *testing.T) {
	t.Parallel()
	f, gw := auditGateway(t)
	out, errOut, code := run(t, gw, "audit")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
TIME                  PRINCIPAL  METHOD                        RESOURCE          DECISION  CODE               REASON
2026-01-02T15:03:05Z  users/ana  JobService/SubmitJob          projects/default  allowed   OK                 -
2026-01-02T14:04:05Z  users/bob  ClusterService/CreateCluster  projects/default  denied    ResourceExhausted  project default: 17 nodes would exceed the quota of 16 nodes (LOOM_GATEWAY_QUOT…
`)
	req, _ := fakegw.LastRequest[*loomv1.ListAuditRecordsRequest](f)
	if req.GetParent() != "projects/default" || req.GetPrincipal() != "" {
		t.Errorf("request %v", req)
	}

	out, errOut, code = run(t, gw, "audit", "--all-projects", "--principal", "anonymous")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
TIME                  PROJECT  PRINCIPAL  METHOD                RESOURCE  DECISION  CODE             REASON
2026-01-02T13:04:05Z  other    anonymous  JobService/CancelJob  jobs/4    denied    Unauthenticated  from 10.0.0.9: no credential;�[2J the call needs one
`)
	if req, _ := fakegw.LastRequest[*loomv1.ListAuditRecordsRequest](f); req.GetParent() != "projects/-" || req.GetPrincipal() != "anonymous" {
		t.Errorf("request %v", req)
	}

	out, _, code = run(t, gw, "audit", "--project", "-", "-o", "json", "--limit", "2")
	got := &loomv1.ListAuditRecordsResponse{}
	if err := protojson.Unmarshal([]byte(out), got); code != 0 || err != nil {
		t.Fatalf("json: exit %d, %v\n%s", code, err, out)
	}
	if !proto.Equal(got, &loomv1.ListAuditRecordsResponse{Records: f.AuditRecords[:2]}) {
		t.Errorf("json: %v", got)
	}
	if out, _, _ := run(t, gw, "audit", "--project", "nobody"); !strings.Contains(out, "No audit records.") {
		t.Errorf("an empty trail: %q", out)
	}
}

// TestAuditCommandCleansRecords: a record's resource is the name a caller
// sent, kept as sent (a stranger's refused call is recorded too), and its
// reason may echo it; neither may act on the terminal of the admin who
// reads the trail: an escape sequence (OSC, which retitles the window or
// writes the clipboard; CSI, which clears the screen) or a bidi override
// is printed as U+FFFD in every column.
func TestAuditCommandCleansRecords(t *testing.T) {
	t.Parallel()
	f := &fakegw.Gateway{AuditRecords: []*loomv1.AuditRecord{{
		Id: "1", Time: timestamppb.New(fakegw.TestNow), Principal: "anonymous\u202e", Method: "/loom.v1.ModelService/GetModel",
		Resource: "projects/default/models/\x1b]52;c;aGk=\x07tiny\x1b[2J", Decision: "denied", Code: "Unauthenticated",
		Project: "-", Reason: "from 10.0.0.9: model \u202eyniT\u202c: no credential",
	}}}
	gw := f.Serve(t)
	out, errOut, code := run(t, gw, "audit", "--all-projects")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\u202c"} {
		if strings.Contains(out, bad) {
			t.Errorf("printed %q raw:\n%q", bad, out)
		}
	}
	if !strings.Contains(out, "projects/default/models/\ufffd]52;c;aGk=\ufffdtiny\ufffd[2J") {
		t.Errorf("the resource is not shown with each control character as U+FFFD:\n%s", out)
	}
}
