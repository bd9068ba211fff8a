package cli

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// helpTexts returns every command's path with its Long and Example text.
func helpTexts() map[string]string {
	texts := map[string]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		texts[c.CommandPath()] = c.Long + "\n" + c.Example
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newApp().rootCommand())
	return texts
}

// clusterExample matches a help example that names a cluster (and, for
// resize, a pool): lower-case names only, so that placeholders (NAME,
// POOL) are not taken for one.
var clusterExample = regexp.MustCompile(`loom clusters (describe|get|resize|slurm-conf|login|delete|goodput|update) ([a-z0-9][a-z0-9-]*)(?: ([a-z0-9][a-z0-9-]*))?`)

// clusterFlagExample matches an example command line that names a cluster
// with --cluster.
var clusterFlagExample = regexp.MustCompile(`(?m)^\s*(?:\$ )?loom .*--cluster[ =]([a-z0-9][a-z0-9-]*)`)

// slurmClusterExample matches a Slurm command given a cluster with -M or
// --clusters (`sbatch -M NAME`, `loom ... slurm squeue --clusters=NAME`),
// and slurmEnvClusterExample a command run with LOOM_CLUSTER set
// (`LOOM_CLUSTER=NAME scancel 12`): Slurm users name the cluster these ways,
// not with --cluster. The name is the last group; a list (-M a,b) is
// split by the test.
var (
	slurmClusterExample    = regexp.MustCompile(`\b(?:` + strings.Join(SlurmCommands, "|") + `)\b[^\x60\n]*?\s(?:-M|--clusters)[ =]([a-z0-9][a-z0-9,-]*)`)
	slurmEnvClusterExample = regexp.MustCompile(`\bLOOM_CLUSTER=(?:projects/[a-z0-9-]+/clusters/)?([a-z0-9][a-z0-9-]*)`)
)

// slurmExampleClusters returns the clusters the -M and LOOM_CLUSTER forms
// of text name, each with the text that names it. A one-letter name (the
// a and b of `squeue -M a,b`) and Slurm's all (`-M all`, which Loom
// refuses) are the docs' notation, not a cluster to create.
func slurmExampleClusters(text string) [][2]string {
	var named [][2]string
	for _, re := range []*regexp.Regexp{slurmClusterExample, slurmEnvClusterExample} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			for _, c := range strings.Split(m[1], ",") {
				if len(c) > 1 && c != "all" {
					named = append(named, [2]string{strings.TrimSpace(m[0]), c})
				}
			}
		}
	}
	return named
}

// TestHelpExamplesNameTheExampleClusters: an example in --help that acts on
// a cluster names one that examples/clusters/ creates, and resize one of its
// pools. `loom clusters --help` created a3-ultra-4node from its file, then
// described, resized ("pool" a3u, the node set), logged in to and deleted
// "a3-ultra", which does not exist: a new user copying the lines got
// "not found" at every step after the first.
func TestHelpExamplesNameTheExampleClusters(t *testing.T) {
	t.Parallel()
	pools := examplePools(t)
	seen := 0
	for path, text := range helpTexts() {
		for _, m := range clusterExample.FindAllStringSubmatch(text, -1) {
			seen++
			verb, cluster, pool := m[1], m[2], m[3]
			ps, ok := pools[cluster]
			if !ok {
				t.Errorf("%s --help: %q names cluster %q, which no file of examples/clusters creates (%v)", path, m[0], cluster, slices.Sorted(maps.Keys(pools)))
				continue
			}
			if verb == "resize" && !slices.Contains(ps, pool) {
				t.Errorf("%s --help: %q resizes pool %q; cluster %s's pools are %v", path, m[0], pool, cluster, ps)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no help example names a cluster: the pattern no longer matches the examples")
	}
	seen = 0
	for path, text := range helpTexts() {
		for _, m := range clusterFlagExample.FindAllStringSubmatch(text, -1) {
			seen++
			if _, ok := pools[m[1]]; !ok {
				t.Errorf("%s --help: %q names cluster %q, which no file of examples/clusters creates", path, strings.TrimSpace(m[0]), m[1])
			}
		}
	}
	if seen == 0 {
		t.Fatal("no help example names a cluster with --cluster: the pattern no longer matches the examples")
	}
}

// helpCreateExample matches a help example that creates a cluster, with
// what feeds -f: the command piped in, if any, and the file.
var helpCreateExample = regexp.MustCompile(`(?m)^[ \t]*(?:(loom clusters example[^|\n]*)\|\s*)?loom clusters create -f (\S+)`)

// TestHelpCreatesClustersFromAnywhere: a help example that creates a
// cluster works from any directory, as `loom clusters example NAME |
// loom clusters create -f -` does, and a help that names a file of
// examples/clusters/ says how to get it without the repository. The root
// help's `loom clusters create -f examples/clusters/one-node-8gpu.json` and
// loom demo's "the cluster in examples/clusters/demo.json" held only from
// the repository's root, not after go install.
func TestHelpCreatesClustersFromAnywhere(t *testing.T) {
	t.Parallel()
	seen := 0
	for path, text := range helpTexts() {
		for _, m := range helpCreateExample.FindAllStringSubmatch(text, -1) {
			seen++
			if m[2] != "-" || m[1] == "" {
				t.Errorf("%s --help: %q reads a file relative to the working directory: pipe loom clusters example NAME into -f -", path, strings.TrimSpace(m[0]))
				continue
			}
			args := strings.Fields(m[1])[3:]
			if len(args) > 1 || len(args) == 1 && !slices.Contains(exampleClusterNames(), args[0]) {
				t.Errorf("%s --help: %q: loom clusters example takes one of %v", path, strings.TrimSpace(m[0]), exampleClusterNames())
			}
		}
		if strings.Contains(text, "examples/clusters/") && !strings.Contains(text, "loom clusters example") {
			t.Errorf("%s --help names a file of examples/clusters/, which only the repository holds, without saying loom clusters example prints it", path)
		}
	}
	if seen == 0 {
		t.Fatal("no help example creates a cluster: the pattern no longer matches the examples")
	}
}

// examplePools returns the pools of each cluster examples/clusters/
// creates, by cluster id.
func examplePools(t *testing.T) map[string][]string {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "..", "examples", "clusters")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example clusters in %s: %v", dir, err)
	}
	pools := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		req, err := parseClusterFile(f, data, "default")
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range req.GetCluster().GetCompute().GetNodePools() {
			pools[req.GetClusterId()] = append(pools[req.GetClusterId()], p.GetId())
		}
	}
	return pools
}

// TestDocsExamplesNameTheExampleClusters: the command lines of docs/*.md
// that name a cluster (--cluster NAME, loom clusters VERB NAME, a Slurm
// command's -M NAME or --clusters NAME, LOOM_CLUSTER=NAME) name one that
// examples/clusters/ creates, and a resize one of its pools, as the help's
// examples do. docs/training.md launched the 70B recipe on "--cluster a3u"
// and docs/health.md listed the nodes of "a3u", a cluster only the tests'
// fixture has: copied, they answered "not found"; docs/slurm.md's
// "sbatch -M a3u" and "LOOM_CLUSTER=a3u scancel 12" still did after that.
func TestDocsExamplesNameTheExampleClusters(t *testing.T) {
	t.Parallel()
	pools := examplePools(t)
	docs, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	seen := 0
	var slurmDoc []byte
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, m := range clusterFlagExample.FindAllStringSubmatch(text, -1) {
			seen++
			if _, ok := pools[m[1]]; !ok {
				t.Errorf("%s: %q names cluster %q, which no file of examples/clusters creates (%v)", filepath.Base(doc), strings.TrimSpace(m[0]), m[1], slices.Sorted(maps.Keys(pools)))
			}
		}
		for _, m := range clusterExample.FindAllStringSubmatch(text, -1) {
			seen++
			verb, cluster, pool := m[1], m[2], m[3]
			if ps, ok := pools[cluster]; !ok {
				t.Errorf("%s: %q names cluster %q, which no file of examples/clusters creates", filepath.Base(doc), m[0], cluster)
			} else if verb == "resize" && !slices.Contains(ps, pool) {
				t.Errorf("%s: %q resizes pool %q; cluster %s's pools are %v", filepath.Base(doc), m[0], pool, cluster, ps)
			}
		}
		for _, n := range slurmExampleClusters(text) {
			seen++
			if _, ok := pools[n[1]]; !ok {
				t.Errorf("%s: %q names cluster %q, which no file of examples/clusters creates (%v)", filepath.Base(doc), n[0], n[1], slices.Sorted(maps.Keys(pools)))
			}
		}
		if filepath.Base(doc) == "slurm.md" {
			slurmDoc = data
		}
	}
	if seen == 0 {
		t.Fatal("no doc example names a cluster: the patterns no longer match the docs")
	}
	if seen = len(slurmExampleClusters(string(slurmDoc))); seen == 0 {
		t.Fatal("no Slurm example of docs/slurm.md names a cluster with -M or LOOM_CLUSTER: the patterns no longer match the docs")
	}
}

// TestHelpNamesEverySlurmCommand: `loom slurm --help` and `loom clusters
// login --help` list the Slurm commands a login's PATH leads with. Written
// by hand, both lists lacked sstat and seff, and login's said sstat was one
// of the commands Loom does not provide.
func TestHelpNamesEverySlurmCommand(t *testing.T) {
	t.Parallel()
	texts := helpTexts()
	for _, path := range []string{"loom slurm", "loom clusters login"} {
		text, ok := texts[path]
		if !ok {
			t.Fatalf("no command %q", path)
		}
		words := strings.FieldsFunc(text, func(r rune) bool { return !('a' <= r && r <= 'z') })
		for _, name := range SlurmCommands {
			if !slices.Contains(words, name) {
				t.Errorf("%s --help does not name %s, one of the Slurm commands on a login's PATH", path, name)
			}
		}
		for _, line := range strings.Split(text, "\n") {
			if len(line) > 80 {
				t.Errorf("%s --help: a line of %d columns, over 80: %q", path, len(line), line)
			}
		}
	}
}

func TestWrapWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		text   string
		width  int
		indent string
		want   string
	}{
		{"a bb ccc dd", 6, "> ", "a bb\n> ccc dd"},
		{"averyverylongword x", 4, "", "averyverylongword\nx"},
		{"  spaced   out  ", 20, "", "spaced out"},
		{"", 10, "", ""},
	} {
		if got := wrapWords(c.text, c.width, c.indent); got != c.want {
			t.Errorf("wrapWords(%q, %d, %q) = %q, want %q", c.text, c.width, c.indent, got, c.want)
		}
	}
	if got := slurmCommandList(); !strings.HasSuffix(got, " and "+SlurmCommands[len(SlurmCommands)-1]) || !strings.HasPrefix(got, SlurmCommands[0]+", ") {
		t.Errorf("slurmCommandList() = %q", got)
	}
}

// TestDocsTrainJobsNameAnOutput: `loom train` refuses to start without an
// output directory (--out, LOOM_MODEL_DIR, which `loom jobs submit --model`
// sets, or AIP_MODEL_DIR), so a documented `loom jobs submit ... -- loom
// train` without --model failed at once, exit 2, as often as --retries
// allowed: the README's did. Every such command in the README, docs/ and
// --help names a model or an --out.
func TestDocsTrainJobsNameAnOutput(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for _, f := range append(files, filepath.Join(root, "README.md")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = string(data)
	}
	for path, text := range helpTexts() {
		texts[path+" --help"] = text
	}
	seen := 0
	for where, text := range texts {
		// A command continued with a backslash is one line.
		text = strings.ReplaceAll(text, "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			i := strings.Index(line, "loom jobs submit ")
			j := strings.Index(line, "-- loom train")
			if i < 0 || j < i {
				continue
			}
			seen++
			if cmd := line[i:]; !strings.Contains(cmd, "--model ") && !strings.Contains(cmd, "--out") && !strings.Contains(cmd, "MODEL_DIR") {
				t.Errorf("%s: %q runs loom train with no output directory (it exits 2): add --model NAME", where, strings.TrimSpace(line))
			}
		}
	}
	if seen == 0 {
		t.Fatal("no documented `loom jobs submit ... -- loom train`: the pattern no longer matches")
	}
}
