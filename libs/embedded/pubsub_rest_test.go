package embedded

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// A message published over REST, as gcloud sends it, is pulled over gRPC
// with its data and attributes; what is not a valid publish answers
// Google's error shape with the status the house maps its code to, and
// publishes nothing.
func TestPubSubRESTPublish(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := startPubSub(t)
	if err := p.Ensure(ctx, PubSubProject, LoomPubSubTopics()); err != nil {
		t.Fatal(err)
	}
	if err := p.StartREST(""); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.RESTAddr, "127.0.0.1:") {
		t.Fatalf("RESTAddr = %q, want loopback", p.RESTAddr)
	}
	base := "http://" + p.RESTAddr + "/v1/projects/" + PubSubProject + "/topics/"
	post := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: %d %q is not JSON", method, url, resp.StatusCode, b)
		}
		return resp.StatusCode, out
	}

	// gcloud's request: data base64, attributes a map.
	code, out := post("POST", base+PubSubIngressTopic+":publish",
		`{"messages":[{"data":"eyJwYXJlbnQiOiJwcm9qZWN0cy9tbCJ9","attributes":{"ce-id":"a-1","ce-type":"loom.ingress.v1.SubmitJob"}}]}`)
	if ids, _ := out["messageIds"].([]any); code != http.StatusOK || len(ids) != 1 {
		t.Fatalf("publish = %d %v, want 200 with one message id", code, out)
	}
	_, sub := pubsubConn(t, p.Addr)
	resp, err := sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: "projects/" + PubSubProject + "/subscriptions/" + PubSubIngressSubscription, MaxMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ReceivedMessages) != 1 || string(resp.ReceivedMessages[0].Message.Data) != `{"parent":"projects/ml"}` ||
		resp.ReceivedMessages[0].Message.Attributes["ce-type"] != "loom.ingress.v1.SubmitJob" {
		t.Fatalf("pulled %v", resp.ReceivedMessages)
	}
	if _, err := sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: "projects/" + PubSubProject + "/subscriptions/" + PubSubIngressSubscription,
		AckIds: []string{resp.ReceivedMessages[0].AckId}}); err != nil {
		t.Fatal(err)
	}

	many := `{"messages":[` + strings.Repeat(`{"data":"eA=="},`, pubSubRESTMaxMessages) + `{"data":"eA=="}]}`
	for _, c := range []struct {
		name, method, url, body string
		code                    int
		status, says            string
	}{
		{"unknown topic", "POST", base + "nope:publish", `{"messages":[{"data":"eA=="}]}`, 404, "NOT_FOUND", "nope"},
		{"no messages", "POST", base + PubSubIngressTopic + ":publish", `{"messages":[]}`, 400, "INVALID_ARGUMENT", "messages: 0 given, want 1 to 1000"},
		{"too many messages", "POST", base + PubSubIngressTopic + ":publish", many, 400, "INVALID_ARGUMENT", "messages: 1001 given"},
		{"data not base64", "POST", base + PubSubIngressTopic + ":publish", `{"messages":[{"data":"%%%"}]}`, 400, "INVALID_ARGUMENT", "not a publish request"},
		{"not JSON", "POST", base + PubSubIngressTopic + ":publish", `messages`, 400, "INVALID_ARGUMENT", "not a publish request"},
		{"too large", "POST", base + PubSubIngressTopic + ":publish", `{"messages":[{"data":"` + strings.Repeat("A", pubSubRESTMaxBody) + `"}]}`, 413, "INVALID_ARGUMENT", "larger than 10485760 bytes"},
		{"another call", "GET", base + PubSubIngressTopic, "", 404, "NOT_FOUND", "serves only POST /v1/projects/{project}/topics/{topic}:publish"},
		{"pull is not served", "POST", "http://" + p.RESTAddr + "/v1/projects/" + PubSubProject + "/subscriptions/" + PubSubIngressSubscription + ":pull", `{}`, 404, "NOT_FOUND", "serves only"},
		{"GET publish", "GET", base + PubSubIngressTopic + ":publish", "", 501, "UNIMPLEMENTED", "only POST publishes"},
	} {
		code, out := post(c.method, c.url, c.body)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != c.code || e["status"] != c.status || e["code"] != float64(c.code) || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %v, want %d %s saying %q", c.name, code, out, c.code, c.status, c.says)
		}
	}
	// None of the refused requests published anything.
	pub, _ := pubsubConn(t, p.Addr)
	if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: "projects/" + PubSubProject + "/topics/" + PubSubIngressTopic,
		Messages: []*pubsubpb.PubsubMessage{{Data: []byte("marker")}}}); err != nil {
		t.Fatal(err)
	}
	resp, err = sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: "projects/" + PubSubProject + "/subscriptions/" + PubSubIngressSubscription, MaxMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ReceivedMessages) != 1 || !bytes.Equal(resp.ReceivedMessages[0].Message.Data, []byte("marker")) {
		t.Fatalf("after the refusals the subscription holds %d messages, want only the marker", len(resp.ReceivedMessages))
	}
}

// The REST publish of `loom up` takes no credential, so it takes requests
// only from this machine's clients, not from a web page its user visits:
// such a page could POST a publish as text/plain (no CORS preflight; the
// JSON is read all the same) and put forged public events on loom-events
// or messages on the ingress, or rebind a name of its own to 127.0.0.1.
// Each is refused 403 naming why, and nothing is published.
func TestPubSubRESTRefusesOtherSites(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := startPubSub(t)
	if err := p.Ensure(ctx, PubSubProject, LoomPubSubTopics()); err != nil {
		t.Fatal(err)
	}
	if err := p.StartREST(""); err != nil {
		t.Fatal(err)
	}
	url := "http://" + p.RESTAddr + "/v1/projects/" + PubSubProject + "/topics/" + PubSubIngressTopic + ":publish"
	body := `{"messages":[{"data":"eA==","attributes":{"ce-id":"forged"}}]}`
	for name, c := range map[string]struct {
		mutate func(*http.Request)
		says   string
	}{
		"a text/plain body":   {func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, `must be sent as application/json, not \"text/plain\"`},
		"another site's page": {func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, `Origin \"https://evil.example\" is another site`},
		"a rebound name":      {func(r *http.Request) { r.Host = "rebind.evil.example" }, `Host \"rebind.evil.example\" is not an IP address or localhost`},
		"a cross-site fetch":  {func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, `Sec-Fetch-Site \"cross-site\"`},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		c.mutate(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "PERMISSION_DENIED") || !strings.Contains(string(b), c.says) {
			t.Errorf("%s: %d %s; want 403 PERMISSION_DENIED saying %s", name, resp.StatusCode, b, c.says)
		}
	}
	pub, sub := pubsubConn(t, p.Addr)
	if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: "projects/" + PubSubProject + "/topics/" + PubSubIngressTopic,
		Messages: []*pubsubpb.PubsubMessage{{Data: []byte("marker")}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: "projects/" + PubSubProject + "/subscriptions/" + PubSubIngressSubscription, MaxMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ReceivedMessages) != 1 || !bytes.Equal(resp.ReceivedMessages[0].Message.Data, []byte("marker")) {
		t.Fatalf("after the refusals the subscription holds %d messages, want only the marker", len(resp.ReceivedMessages))
	}
}
