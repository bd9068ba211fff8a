package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/services/gateway"
)

// watchLine is one line of the REST watch stream.
type watchLine struct {
	Result *struct {
		Type       string `json:"type"`
		Collection string `json:"collection"`
		Name       string `json:"name"`
		Model      *struct {
			LatestVersion string `json:"latest_version"`
		} `json:"model"`
		SlurmNode *struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"slurm_node"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// openWatch opens GET /v1/projects/default:watchChanges?collections=cols
// on the stack and returns its lines, after its SYNCED, and when that came.
func openWatch(t *testing.T, s *trainingStack, cols string) (<-chan watchLine, time.Time) {
	t.Helper()
	ctx, cancel := context.WithCancel(s.ctx)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.st.RESTAddr+"/v1/projects/default:watchChanges?collections="+cols, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", cols, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("watch %s: HTTP %d", cols, resp.StatusCode)
	}
	lines := make(chan watchLine, 256)
	go func() {
		defer resp.Body.Close()
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 1<<20), 8<<20)
		for sc.Scan() {
			var l watchLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				return
			}
			select {
			case lines <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case l, ok := <-lines:
			if !ok || l.Error != nil {
				t.Fatalf("watch %s ended before SYNCED: %+v", cols, l.Error)
			}
			if l.Result != nil && l.Result.Type == "SYNCED" {
				return lines, time.Now()
			}
		case <-s.ctx.Done():
			t.Fatalf("watch %s: no SYNCED", cols)
		}
	}
}

// awaitLine waits until a line match accepts arrives, failing at deadline.
func awaitLine(t *testing.T, lines <-chan watchLine, deadline time.Time, what string, match func(watchLine) bool) {
	t.Helper()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			if l.Result != nil && match(l) {
				return
			}
		case <-timer.C:
			t.Fatalf("%s: not on the open watch by the deadline, before its %s refresh would have listed it", what, gateway.DefaultChangeRefresh)
		}
	}
}

// TestWatchChangesLiveOnStack: on the embedded stack, a cluster created, a
// model uploaded and a new version of it reach an open watch from their
// owners' events, well before the watch's safety-net refresh
// (gateway.DefaultChangeRefresh) could have listed them: each is awaited with
// a deadline that ends before the first refresh of a watch opened just
// before it.
func TestWatchChangesLiveOnStack(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	// The deadline: at most 15 s, and 2 s before the watch's first refresh.
	deadline := func(synced time.Time) time.Time {
		d := synced.Add(gateway.DefaultChangeRefresh - 2*time.Second)
		if lim := time.Now().Add(15 * time.Second); lim.Before(d) {
			d = lim
		}
		return d
	}

	lines, synced := openWatch(t, s, "clusters,nodes")
	start := time.Now()
	s.must("clusters", "create", "--async", "-f", writeFile(t, "fed.json", `{"name": "fed", "compute": {"nodePools": [
  {"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 1}]}}`))
	awaitLine(t, lines, deadline(synced), "the created cluster", func(l watchLine) bool {
		return l.Result.Type == "CHANGED" && l.Result.Collection == "clusters" && l.Result.Name == "projects/default/clusters/fed"
	})
	t.Logf("a created cluster showed on the open watch %s after the create", time.Since(start).Round(time.Millisecond))

	art := modelArtifact(t)
	isFed := func(l watchLine) bool {
		return l.Result.Type == "CHANGED" && l.Result.Collection == "models" && strings.Contains(l.Result.Name, "/models/fed")
	}
	lines, synced = openWatch(t, s, "models")
	start = time.Now()
	s.must("models", "upload", art, "--model", "fed", "--async")
	awaitLine(t, lines, deadline(synced), "the uploaded model", isFed)
	t.Logf("an uploaded model showed on the open watch %s after the upload", time.Since(start).Round(time.Millisecond))
	// A new version changes the model as ListModels shows it
	// (latest_version): the console's model page relies on it.
	start = time.Now()
	s.must("models", "upload", art, "--parent-model", "fed", "--async")
	awaitLine(t, lines, deadline(synced), "the model's second version", func(l watchLine) bool {
		return isFed(l) && l.Result.Model != nil && l.Result.Model.LatestVersion == "2"
	})
	t.Logf("a new version showed on the open watch %s after the upload", time.Since(start).Round(time.Millisecond))
}

// modelArtifact writes a complete artifact directory (a file and the
// MANIFEST of its SHA-256) for `loom models upload`.
func modelArtifact(t *testing.T) string {
	t.Helper()
	art := t.TempDir()
	weights := []byte("fed weights")
	if err := os.WriteFile(filepath.Join(art, "model.bin"), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(art, "MANIFEST"), fmt.Appendf(nil, "%x  model.bin\n", sha256.Sum256(weights)), 0o644); err != nil {
		t.Fatal(err)
	}
	return art
}
