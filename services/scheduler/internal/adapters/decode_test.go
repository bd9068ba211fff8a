package adapters

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// encodedJobs returns n job records as the jobs hash holds them.
func encodedJobs(t testing.TB, n int) map[string][]byte {
	raw := make(map[string][]byte, n)
	for i := range n {
		name := "projects/p/jobs/" + strconv.Itoa(i+1)
		j := &domain.Job{JobRecord: jobstore.JobRecord{Job: &loomv1.Job{Name: name, JobId: strconv.Itoa(i + 1),
			Cluster: "projects/p/clusters/c", GpusPerNode: int32(1 + i%8), User: "u" + strconv.Itoa(i%50),
			Command: []string{"train", "--seed", strconv.Itoa(i)}, State: loomv1.JobState_PENDING}}}
		b, err := EncodeJob(j)
		if err != nil {
			t.Fatal(err)
		}
		raw[name] = b
	}
	return raw
}

// TestDecodeAll checks that decodeAll, parallel or not, decodes every
// record once and reports a record that does not decode.
func TestDecodeAll(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 3, parallelDecodeMin - 1, 3*parallelDecodeMin + 7} {
		raw := encodedJobs(t, n)
		jobs, err := decodeAll(raw, func(name string, b []byte) (*domain.Job, error) {
			return DecodeTask(name, b, func(string) *loomv1.Job { return nil })
		})
		if err != nil {
			t.Fatalf("%d records: %v", n, err)
		}
		seen := map[string]bool{}
		for _, j := range jobs {
			if j == nil || seen[j.Name()] {
				t.Fatalf("%d records: a job missing or decoded twice (%v)", n, j)
			}
			seen[j.Name()] = true
			want, _ := DecodeTask(j.Name(), raw[j.Name()], func(string) *loomv1.Job { return nil })
			if !proto.Equal(j.Job, want.Job) {
				t.Fatalf("%d records: %s decoded as %v, want %v", n, j.Name(), j.Job, want.Job)
			}
		}
		if len(seen) != n {
			t.Fatalf("%d records: decoded %d", n, len(seen))
		}

		if n == 0 {
			continue
		}
		bad := fmt.Sprintf("projects/p/jobs/%d", n)
		raw[bad] = []byte("{not json")
		_, err = decodeAll(raw, func(name string, b []byte) (*domain.Job, error) {
			if _, err := DecodeTask(name, b, func(string) *loomv1.Job { return nil }); err != nil {
				return nil, fmt.Errorf("load job %s: %w", name, err)
			}
			return nil, nil
		})
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Fatalf("%d records, one bad: error %v, want one naming %s", n, err, bad)
		}
	}
	want := errors.New("boom")
	if _, err := decodeAll(map[string][]byte{"a": nil}, func(string, []byte) (int, error) { return 0, want }); !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

// BenchmarkDecodeJobs decodes 100,000 job records, as a restarted
// scheduler does before its first pass.
func BenchmarkDecodeJobs(b *testing.B) {
	raw := encodedJobs(b, 100000)
	b.ResetTimer()
	for b.Loop() {
		if _, err := decodeAll(raw, func(name string, v []byte) (*domain.Job, error) {
			return DecodeTask(name, v, func(string) *loomv1.Job { return nil })
		}); err != nil {
			b.Fatal(err)
		}
	}
}
