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
