package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestClusterPageShowsPartitionStates: the Clusters page shows each
// partition of a cluster with its state as sinfo's AVAIL does (UP where the
// spec leaves it empty, DOWN, DRAIN, INACTIVE as set), each a badge whose
// tone says whether the partition starts jobs; before, the page showed no
// partition at all.
func TestClusterPageShowsPartitionStates(t *testing.T) {
	t.Parallel()
	const c1 = "projects/default/clusters/c1"
	partitions := []any{
		map[string]any{"id": "all", "node_set_ids": []string{"gpu", "cpu"}, "default": true},
		map[string]any{"id": "maint", "node_set_ids": []string{"gpu"}, "state": "DOWN", "max_time": "1:00:00"},
		map[string]any{"id": "old", "node_set_ids": []string{"cpu"}, "state": "DRAIN", "priority_tier": 2},
		map[string]any{"id": "off", "node_set_ids": []string{"cpu"}, "state": "INACTIVE"},
	}
	c := openConsole(t, boundsAPI(t, map[string]func(*http.Request) any{
		"GET /v1/projects/default/clusters": func(*http.Request) any {
			return map[string]any{"clusters": []any{map[string]any{"name": c1,
				"status":       map[string]any{"state": "RUNNING", "ready_nodes": 1, "total_nodes": 1},
				"orchestrator": map[string]any{"slurm": map[string]any{"partitions": partitions}}}}}
		},
	}))
	c.open("clusters", "clusters")
	ctx, cancel := context.WithTimeout(c.bctx, 30*time.Second)
	defer cancel()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#page tr.partition')].map(tr =>
		[tr.cells[0].textContent, tr.cells[1].textContent, tr.cells[1].querySelector('.badge').className,
		 tr.cells[2].textContent, tr.cells[3].textContent, tr.cells[4].textContent].join(' | ')).join('\n')`))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"all* | UP | badge good | gpu, cpu | UNLIMITED | 0",
		"maint | DOWN | badge bad | gpu | 1:00:00 | 0",
		"old | DRAIN | badge warn | cpu | UNLIMITED | 2",
		"off | INACTIVE | badge bad | cpu | UNLIMITED | 0",
	}, "\n")
	if rows != want {
		t.Errorf("partition rows:\n%s\nwant:\n%s", rows, want)
	}
}
