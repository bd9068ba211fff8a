package ingress

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// TestIntegrationDocExamplesDecode reads every example message of
// docs/integration.md (an attribute line, then its JSON data) and checks
// that the ingress reads it into a call: a message a user copies from the
// docs is never dead-lettered for its shape.
func TestIntegrationDocExamplesDecode(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "integration.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)```\n(ce-specversion=[^\n]*)\n```\n```json\n(.*?)```")
	examples := re.FindAllStringSubmatch(string(b), -1)
	types := map[string]bool{}
	for _, ex := range examples {
		attrs := map[string]string{}
		for _, kv := range strings.Split(ex[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			attrs[k] = v
		}
		ev, perr := cloudevent.FromPubSub(attrs, []byte(ex[2]))
		call, ref := Decide(cloudevent.Delivery{Transport: "pubsub:docs", Event: ev, ParseErr: perr}, cloudevent.DefaultMaxData)
		if ref != nil || call == nil {
			t.Errorf("the example %s is refused: %+v", attrs["ce-type"], ref)
			continue
		}
		types[attrs["ce-type"]] = true
	}
	for typ := range Methods {
		if !types[typ] {
			t.Errorf("docs/integration.md has no example of %s that decodes", typ)
		}
	}
}

// TestIntegrationDocListsMethods: the ce_type table of docs/integration.md's
// Messages section, the contract Methods follows, names exactly Methods'
// types, each with its call: a type added, dropped or rerouted here without
// the doc fails.
func TestIntegrationDocListsMethods(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "integration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Messages\n")
	if !ok {
		t.Fatal(`docs/integration.md has no "## Messages" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	// | `loom.ingress.v1.SubmitJob` | `loom.v1.JobService/SubmitJob` | ...
	// (later rows shorten the package: `TrainingService/CancelCustomJob`).
	row := regexp.MustCompile("(?m)^\\| `(" + regexp.QuoteMeta(TypePrefix) + "[A-Za-z]+)` \\| `([A-Za-z0-9.]+/[A-Za-z]+)` \\|")
	listed := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		listed[m[1]] = m[2]
	}
	for typ, m := range Methods {
		call, ok := listed[typ]
		if !ok {
			t.Errorf("docs/integration.md's Messages table does not list %s", typ)
			continue
		}
		if !strings.HasSuffix(m.FullMethod, "/"+call) && !strings.HasSuffix(m.FullMethod, "."+call) {
			t.Errorf("docs/integration.md says %s becomes %s; it calls %s", typ, call, m.FullMethod)
		}
	}
	for typ := range listed {
		if _, ok := Methods[typ]; !ok {
			t.Errorf("docs/integration.md lists %s, which the ingress does not take", typ)
		}
	}
}
