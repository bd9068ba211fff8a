package app

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
	// The thread that forked ends with its start: none of the agent's
	// threads keeps the lower priority (the last one may take a moment to
	// go). The main thread is the exception: the runtime cannot end it, so
	// it parks it for good instead, and it never runs anything again.
	main := strconv.Itoa(os.Getpid())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var niced []string
		for tid, n := range threadNices(t) {
			if n != own && tid != main {
				niced = append(niced, tid+"="+strconv.Itoa(n))
			}
		}
		if len(niced) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads left niced: %v (want all at %d)", niced, own)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := startNiced(exec.Command("/nonexistent/binary"), 3); err == nil {
		t.Fatal("a start that fails reported no error")
	}
}
