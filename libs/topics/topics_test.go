package topics

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// repoRoot is the project root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestDeployListMatchesCode(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "topics.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defaults struct {
			Partitions    int               `yaml:"partitions"`
			DLQPartitions int               `yaml:"dlq_partitions"`
			Config        map[string]string `yaml:"config"`
		} `yaml:"defaults"`
		Topics []struct {
			Name       string `yaml:"name"`
			Writer     string `yaml:"writer"`
			Partitions int    `yaml:"partitions"`
		} `yaml:"topics"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("deploy/topics.yaml: %v", err)
	}
	var fromYAML, fromCode []string
	partitions := map[string]int{}
	for _, tp := range doc.Topics {
		partitions[tp.Name] = tp.Partitions
		if tp.Writer == "" {
			t.Errorf("topic %s has no writer", tp.Name)
		}
		fromYAML = append(fromYAML, tp.Name, tp.Name+DLQSuffix)
	}
	for _, s := range All() {
		fromCode = append(fromCode, s.Name)
		want := doc.Defaults.Partitions
		if n := partitions[s.Name]; n != 0 {
			want = n
		}
		if strings.HasSuffix(s.Name, DLQSuffix) {
			want = doc.Defaults.DLQPartitions
		}
		if s.Partitions != want {
			t.Errorf("%s: %d partitions in code, %d in deploy/topics.yaml", s.Name, s.Partitions, want)
		}
		if s.Configs["retention.ms"] != doc.Defaults.Config["retention.ms"] {
			t.Errorf("%s: retention differs from deploy/topics.yaml", s.Name)
		}
	}
	sort.Strings(fromYAML)
	sort.Strings(fromCode)
	if strings.Join(fromYAML, ",") != strings.Join(fromCode, ",") {
		t.Fatalf("topics differ:\n yaml: %v\n code: %v", fromYAML, fromCode)
	}
}

func TestComposeFileParses(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	for _, name := range []string{"kafka", "redis", "gateway", "provisioner", "scheduler", "health", "registry", "agent"} {
		svc, ok := doc.Services[name]
		if !ok || svc.Image == "" {
			t.Errorf("docker-compose.yaml: service %q missing or without image", name)
		}
	}
	if got := doc.Services["kafka"].Environment["KAFKA_PROCESS_ROLES"]; got != "broker,controller" {
		t.Errorf("kafka must run in KRaft mode (broker,controller), got %q", got)
	}
	for _, name := range []string{"gateway", "provisioner", "scheduler", "health", "registry", "agent"} {
		env := doc.Services[name].Environment
		if env["LOOM_BROKERS"] != "kafka:9092" || env["LOOM_REDIS_ADDR"] != "redis:6379" {
			t.Errorf("%s: LOOM_BROKERS/LOOM_REDIS_ADDR not pointed at the compose kafka and redis: %v", name, env)
		}
		// Every service signs and verifies the bus with the services' key;
		// an agent never holds it.
		if key := env["LOOM_SERVICE_KEY_FILE"]; (name == "agent") != (key == "") {
			t.Errorf("%s: LOOM_SERVICE_KEY_FILE = %q", name, key)
		}
		if env["LOOM_REDIS_PASSWORD_FILE"] == "" {
			t.Errorf("%s: no LOOM_REDIS_PASSWORD_FILE: Redis requires a password", name)
		}
	}
	// Nothing is published on every interface.
	for name, svc := range doc.Services {
		for _, p := range svc.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every interface; want 127.0.0.1:", name, p)
			}
		}
	}
}

func TestEveryTopicHasDLQ(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, s := range All() {
		names[s.Name] = true
	}
	for n := range names {
		if !strings.HasSuffix(n, DLQSuffix) && !names[n+DLQSuffix] {
			t.Errorf("%s has no dead-letter topic", n)
		}
	}
}
