package procruntime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// threadNices returns the nice value of each of this process's threads.
func threadNices(t *testing.T) map[string]int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // the thread ended meanwhile
		}
		// Field 19 is the nice value; the name (field 2) may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		n, err := strconv.Atoi(f[16])
		if err != nil {
			t.Fatalf("%s: nice %q: %v", d, f[16], err)
		}
		out[filepath.Base(d)] = n
	}
	return out
}

func TestStartNiced(t *testing.T) {
	own, err := niceOf()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ incr, want int }{
		{0, own},
		{3, min(own+3, maxNice)},
		{maxNice + 5, maxNice}, // the kernel's floor, not an error
	} {
		c := exec.Command("nice")
		var out strings.Builder
		c.Stdout = &out
		if err := startNiced(c, tc.incr); err != nil {
			t.Fatalf("incr %d: %v", tc.incr, err)
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("incr %d: %v", tc.incr, err)
		}
		if got := strings.TrimSpace(out.String()); got != strconv.Itoa(tc.want) {
			t.Errorf("incr %d: child's nice value = %s, want %d", tc.incr, got, tc.want)
		}
	}
	// Forking comes from one thread per increment, made once: more starts
	// make no more niced threads, and the others keep the agent's value.
	niced := func() int {
		n := 0
		for _, v := range threadNices(t) {
			if v != own {
				n++
			}
		}
		return n
	}
	before := niced()
	if before > 2 {
		t.Fatalf("%d niced threads after starts at two increments, want at most 2", before)
	}
	for i := 0; i < 20; i++ {
		c := exec.Command("true")
		if err := startNiced(c, 3); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if after := niced(); after != before {
		t.Fatalf("niced threads went from %d to %d over 20 starts: a thread per start", before, after)
	}
	if err := startNiced(exec.Command("/nonexistent/binary"), 3); err == nil {
		t.Fatal("a start that fails reported no error")
	}
}
