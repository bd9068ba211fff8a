package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func ingressGateway(t *testing.T) (*fakegw.Gateway, string) {
	at := fakegw.Ago
	f := &fakegw.Gateway{Ingress: &fakegw.Ingress{
		Producers: []*loomv1.IngressProducer{
			{Project: "default", Source: "//pipelines/etl", Principal: "users/ana", Received: 12, Accepted: 10, Refused: 1, Invalid: 1,
				Duplicates: 4, FirstTime: at(time.Hour), LastTime: at(2 * time.Minute), LastReason: "Access/permission denied: needs role user in projects/default"},
			{Project: "default", Source: "kafka-orchestrator", Received: 1, Invalid: 1, LastTime: at(5 * time.Hour),
				LastReason: "no credential:\x1b[2J send the ce_credential header"},
			{Project: "other", Source: "//o/cron", Principal: "users/oz", Received: 2, Accepted: 2, LastTime: at(time.Minute)},
		},
		Messages: []*loomv1.IngressMessage{
			{Id: "m3", Source: "//pipelines/etl", Type: "loom.ingress.v1.SubmitJob", Project: "default", Principal: "users/ana",
				Transport: "pubsub:projects/loom-local/subscriptions/loom-ingress-bridge", Outcome: "ACCEPTED", Code: "OK",
				Resource: "projects/default/jobs/7", ReceivedTime: at(2 * time.Minute), Deliveries: 5},
			{Id: "m2", Source: "//pipelines/etl", Type: "loom.ingress.v1.CancelJob", Project: "default", Principal: "users/ana",
				Transport: "kafka:loom.ingress.v1", Outcome: "REFUSED", Code: "PERMISSION_DENIED",
				Reason: "Access/permission denied: needs role user in projects/default", ReceivedTime: at(time.Hour), Deliveries: 1},
			{Id: "m1", Source: "kafka-orchestrator", Type: "loom.ingress.v1.Nope", Project: "default",
				Transport: "kafka:loom.ingress.v1", Outcome: "INVALID", Code: "INVALID_ARGUMENT",
				Reason: "type: loom.ingress.v1.Nope is not a message type", ReceivedTime: at(5 * time.Hour), Deliveries: 1},
			{Id: "o1", Source: "//o/cron", Type: "loom.ingress.v1.SubmitJob", Project: "other", Outcome: "ACCEPTED", Code: "OK",
				ReceivedTime: at(time.Minute), Deliveries: 1},
		},
	}}
	return f, f.Serve(t)
}

// TestIngressCommand: `loom ingress` lists the project's producers (the
// default subcommand), `messages` the messages with the flags as an AIP-160
// filter; every project's with --all-projects adds a PROJECT column;
// --output json is the whole response; reasons stay on their row.
func TestIngressCommand(t *testing.T) {
	t.Parallel()
	f, gw := ingressGateway(t)
	out, errOut, code := run(t, gw, "ingress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
SOURCE              PRINCIPAL  RECEIVED  ACCEPTED  REFUSED  INVALID  FAILED  DUPLICATES  LAST  LAST REASON
//pipelines/etl     users/ana  12        10        1        1        0       4           2m    Access/permission denied: needs role user in projects/default
kafka-orchestrator  -          1         0         0        1        0       0           5h    no credential:�[2J send the ce_credential header
`)
	if req, _ := fakegw.LastRequest[*loomv1.ListIngressProducersRequest](f); req.GetParent() != "projects/default" {
		t.Errorf("producers request %v", req)
	}
	if out2, _, _ := run(t, gw, "ingress", "producers"); out2 != out {
		t.Errorf("`loom ingress producers` differs from `loom ingress`:\n%s", out2)
	}

	out, errOut, code = run(t, gw, "ingress", "messages")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
RECEIVED              ID  SOURCE              TYPE       OUTCOME   CODE               RESOURCE                 DELIVERIES  REASON
2026-01-02T15:02:05Z  m3  //pipelines/etl     SubmitJob  ACCEPTED  OK                 projects/default/jobs/7  5           -
2026-01-02T14:04:05Z  m2  //pipelines/etl     CancelJob  REFUSED   PERMISSION_DENIED  -                        1           Access/permission denied: needs role user in projects/default
2026-01-02T10:04:05Z  m1  kafka-orchestrator  Nope       INVALID   INVALID_ARGUMENT   -                        1           type: loom.ingress.v1.Nope is not a message type
`)

	out, errOut, code = run(t, gw, "ingress", "messages", "--outcome", "refused", "--source", "//pipelines/etl", "--type", "CancelJob")
	if code != 0 || !strings.Contains(out, "m2") || strings.Contains(out, "m3") {
		t.Fatalf("filtered messages: exit %d %s\n%s", code, errOut, out)
	}
	req, _ := fakegw.LastRequest[*loomv1.ListIngressMessagesRequest](f)
	if want := `outcome = "REFUSED" AND source = "//pipelines/etl" AND type = "loom.ingress.v1.CancelJob"`; req.GetFilter() != want {
		t.Errorf("filter %q, want %q", req.GetFilter(), want)
	}

	out, errOut, code = run(t, gw, "ingress", "--all-projects")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "PROJECT  SOURCE") || !strings.Contains(out, "other    //o/cron") {
		t.Errorf("every project's producers:\n%s", out)
	}
	if req, _ := fakegw.LastRequest[*loomv1.ListIngressProducersRequest](f); req.GetParent() != "projects/-" {
		t.Errorf("--all-projects asked %v", req)
	}

	out, _, code = run(t, gw, "ingress", "messages", "-o", "json")
	got := &loomv1.ListIngressMessagesResponse{}
	if err := protojson.Unmarshal([]byte(out), got); code != 0 || err != nil {
		t.Fatalf("json: exit %d, %v\n%s", code, err, out)
	}
	if !proto.Equal(got, &loomv1.ListIngressMessagesResponse{Messages: f.Ingress.Messages[:3]}) {
		t.Errorf("json: %v", got)
	}
	if out, _, _ := run(t, gw, "ingress", "--project", "nobody"); !strings.Contains(out, "No messages came in for projects/nobody yet") ||
		!strings.Contains(out, "docs/integration.md") {
		t.Errorf("no producers: %q", out)
	}
	if out, _, _ := run(t, gw, "ingress", "messages", "--outcome", "FAILED"); !strings.Contains(out, `No ingress messages of projects/default match outcome = "FAILED".`) {
		t.Errorf("no failed messages: %q", out)
	}
}

// TestIngressPaging: every page is read (the gateway's pages are at most
// 1000), and --limit stops at that many rows.
func TestIngressPaging(t *testing.T) {
	t.Parallel()
	f := &fakegw.Gateway{Ingress: &fakegw.Ingress{}}
	for i := range 1205 {
		f.Ingress.Messages = append(f.Ingress.Messages, &loomv1.IngressMessage{Id: fmt.Sprintf("m%d", i), Project: "default",
			Outcome: "ACCEPTED", Deliveries: 1})
	}
	gw := f.Serve(t)
	out, _, code := run(t, gw, "ingress", "messages", "-o", "json")
	got := &loomv1.ListIngressMessagesResponse{}
	if err := protojson.Unmarshal([]byte(out), got); code != 0 || err != nil || len(got.GetMessages()) != 1205 {
		t.Fatalf("all pages: exit %d, %v, %d messages, want 1205", code, err, len(got.GetMessages()))
	}
	if n := len(fakegw.Requests[*loomv1.ListIngressMessagesRequest](f)); n < 2 {
		t.Errorf("%d requests for 1205 messages, want more than one page", n)
	}
	out, _, _ = run(t, gw, "ingress", "messages", "--limit", "3")
	if lines := strings.Count(out, "\n"); lines != 4 {
		t.Errorf("--limit 3: %d lines, want a header and 3 rows:\n%s", lines, out)
	}
}

// TestIngressErrors: bad flags are usage errors that say what to pass;
// the gateway's refusals are explained; a gateway without IngressService
// says so.
func TestIngressErrors(t *testing.T) {
	t.Parallel()
	_, gw := ingressGateway(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ingress", "messages", "--outcome", "LOST"}, "--outcome must be one of ACCEPTED, REFUSED, INVALID, FAILED"},
		{[]string{"ingress", "--limit", "-1"}, "--limit must not be negative"},
		{[]string{"ingress", "messages", "--principal", "a\" OR x = \"b"}, ""}, // quoted: one value, no match, no error
		{[]string{"ingress", "extra"}, "unknown command"},
	} {
		out, errOut, code := run(t, gw, c.args...)
		if c.want == "" {
			if code != 0 || !strings.Contains(out, "No ingress messages") {
				t.Errorf("%v: exit %d %s %s", c.args, code, out, errOut)
			}
			continue
		}
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
	old := (&fakegw.Gateway{}).Serve(t)
	_, errOut, code := run(t, old, "ingress")
	if code == 0 || !strings.Contains(errOut, "list the ingress producers of projects/default") || !strings.Contains(errOut, "does not support this") {
		t.Errorf("a gateway without IngressService: exit %d %q", code, errOut)
	}
}

// TestIngressTablesAreShownSafely: what a publisher sent (a message's
// resource, type, code; a producer's principal and project) is printed
// through row's cleaning: no escape sequence, bidi override or tab
// reaches the terminal, and the row stays one line.
func TestIngressTablesAreShownSafely(t *testing.T) {
	t.Parallel()
	evil := "x\x1b]52;c;cHduZWQ=\x07\u202e\tz"
	var b strings.Builder
	if err := renderIngressMessages(&b, []*loomv1.IngressMessage{{Id: "1", Source: "s", Type: evil, Outcome: evil, Code: evil, Resource: evil, Project: evil}}, true); err != nil {
		t.Fatal(err)
	}
	if err := renderIngressProducers(&b, []*loomv1.IngressProducer{{Source: evil, Principal: evil, Project: evil, LastReason: evil}}, time.Now(), true); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\u202e\t") || strings.Count(out, "\n") != 4 {
		t.Errorf("tables print what was sent raw:\n%q", out)
	}
}
