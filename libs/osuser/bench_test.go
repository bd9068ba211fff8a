package osuser_test

import (
	"os"
	"testing"

	"github.com/loom-ml/loom/libs/osuser"
)

// BenchmarkLookup is the cost of resolving a job's owner (done several
// times per step start).
func BenchmarkLookup(b *testing.B) {
	for b.Loop() {
		if _, err := osuser.Lookup("root"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAs is the cost of one file operation as another user (a
// thread's identity switched and restored).
func BenchmarkAs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	nobody, err := osuser.Lookup("nobody")
	if err != nil {
		b.Skip("no user nobody")
	}
	for b.Loop() {
		if err := osuser.As(nobody, func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
