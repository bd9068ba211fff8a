package clusterspec

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestParseJSONErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, json, field, reason string
	}{
		{"empty", "  \n", "cluster", "empty cluster spec"},
		{"unknown field", `{"compute": {"node_pools": [{"id": "a"}, {"id": "b", "nod_count": 1}]}}`,
			"compute.node_pools[1].nod_count", `unknown field "nod_count"`},
		{"camelCase path", `{"orchestrator": {"slurm": {"partitions": [{"id": "p", "maxTime": 5}]}}}`,
			"orchestrator.slurm.partitions[0].max_time", "invalid value for string field maxTime"},
		{"wrong type", "{\n  \"compute\": {\n    \"node_pools\": [\n      {\"node_count\": \"many\"}\n    ]\n  }\n}",
			"compute.node_pools[0].node_count", "invalid value for int32 field nodeCount"},
		{"bad enum", `{"compute": {"node_pools": [{"capacity": {"type": "CHEAP"}}]}}`,
			"compute.node_pools[0].capacity.type", "invalid value for enum field type"},
		{"syntax", `{"network": {"mtu": 1500,}}`, "network.mtu", "syntax error"},
		{"not an object", `[1, 2]`, "cluster", "unexpected token"},
		{"cut short", "{\n  \"name\": \"x\",", "cluster", "(line 2:15): unexpected end of the JSON"},
	}
	for _, c := range cases {
		_, err := ParseJSON([]byte(c.json))
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || len(inv.Violations) != 1 {
			t.Errorf("%s: ParseJSON = %v, want one InvalidError violation", c.name, err)
			continue
		}
		v := inv.Violations[0]
		if v.Field != c.field || !strings.Contains(v.Reason, c.reason) {
			t.Errorf("%s: violation %q: %q, want %q: ...%s...", c.name, v.Field, v.Reason, c.field, c.reason)
		}
		if c.name != "empty" && !strings.Contains(v.Reason, "line ") {
			t.Errorf("%s: reason %q has no position", c.name, v.Reason)
		}
	}
}

// TestParseJSONRoundTrip: protojson output (camelCase) parses back to the same cluster.
func TestParseJSONRoundTrip(t *testing.T) {
	t.Parallel()
	c := base(t)
	Normalize(c)
	out, err := protojson.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(c, back) {
		t.Fatal("round trip changed the cluster")
	}
}

func TestSnakeCase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"nodePools": "node_pools", "node_pools": "node_pools", "mtu": "mtu", "throughputMbpsPerTib": "throughput_mbps_per_tib"} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseValidate feeds arbitrary bytes through ParseJSON, Normalize,
// Validate and ValidateUpdate: none may panic, Normalize must be idempotent,
// and every rejection must be an InvalidError naming fields.
func FuzzParseValidate(f *testing.F) {
	for _, data := range examples(f) {
		f.Add(data)
	}
	f.Add([]byte(baseJSON))
	f.Add([]byte(`{"compute": {"node_pools": [{"id": "x", "machine_type": "n2-standard-2", "node_count": -1}]}, "orchestrator": {"slurm": {"partitions": [{"id": "p", "node_set_ids": ["x", "x"], "max_time": "1-25"}]}}}`))
	f.Add([]byte(`{"storage": {"home": {"capacity_gib": 7}, "scratch": {"throughput_mbps_per_tib": 7}}, "network": {"mtu": -5}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseJSON(data)
		if err != nil {
			var inv *errs.InvalidError
			if !errors.As(err, &inv) || len(inv.Violations) == 0 || inv.Violations[0].Field == "" {
				t.Fatalf("ParseJSON error %v is not an InvalidError with a field", err)
			}
			return
		}
		old := proto.Clone(c).(*loomv1.Cluster)
		if err := Validate(c); err != nil {
			var inv *errs.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("Validate error %T %v", err, err)
			}
			for _, v := range inv.Violations {
				if v.Field == "" || v.Reason == "" {
					t.Fatalf("violation without field or reason: %+v", v)
				}
			}
		}
		Normalize(c)
		once := proto.Clone(c)
		Normalize(c)
		if !proto.Equal(once, c) {
			t.Fatal("Normalize is not idempotent")
		}
		_ = ValidateUpdate(old, c, nil)
		_ = ValidateUpdate(c, old, []string{"compute.node_pools", "orchestrator.slurm"})
	})
}
