package jobstore

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// jobRecordSamples are stored job records of every shape EncodeJob writes,
// and some it does not.
func jobRecordSamples(t testing.TB) [][]byte {
	var out [][]byte
	for _, rec := range []*JobRecord{
		{Job: &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1", State: loomv1.JobState_PENDING}},
		{Job: &loomv1.Job{Name: "projects/p/jobs/2", JobId: "2"}, Attempt: 3, ModelDir: "/models/2/run-3",
			Excluded: []string{"gpu-1", "gpu-2"}, InfraRestarts: 2, UnlaunchedRequeues: 1, Avoid: "gpu-3"},
		{Job: &loomv1.Job{Name: "projects/p/jobs/3", JobId: "3", Partition: "cpu"}, Attempt: 1, Partitions: "gpu,cpu"},
		{Job: &loomv1.Job{}, Attempt: -1, ModelDir: "<&> \"quoted\" \\ é \u2028", Excluded: []string{"", "ä"}, InfraRestarts: 2147483647,
			UnlaunchedRequeues: -2147483648},
		{Job: nil, Attempt: -2147483648},
	} {
		b, err := EncodeJob(rec, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// A task as its difference from its template: delta and cleared.
	tmpl := &loomv1.Job{Name: "projects/p/jobs/7", JobId: "7", ArrayJobId: "7", Partition: "gpu", Env: map[string]string{"A": "1"}}
	task := &loomv1.Job{Name: "projects/p/jobs/9", JobId: "9", ArrayJobId: "7", ArrayTaskId: 2, Env: map[string]string{"A": "1"}}
	b, err := EncodeJob(&JobRecord{Job: task, Attempt: 1}, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, b)
	for _, s := range []string{
		`{"job":"","attempt":1}`, `{"job":"CAE=","cleared":[3,-4,0]}`, `{"job":"CAE=","excluded":[]}`,
		`{"job":"CAE=","cleared":[]}`, `{"job":"CAE=","delta":false}`, `{"job":null}`, `{"job":"CAE=" }`,
		`{"attempt":2,"job":"CAE="}`, `{"Job":"CAE="}`, `{"job":"CAE=","attempt":1.0}`, `{"job":"CAE=","attempt":1e2}`,
		`{"job":"CAE=","attempt":01}`, `{"job":"CAE=","attempt":2147483648}`, `{"job":"CAE=","attempt":-0}`,
		`{"job":"CA\u0045="}`, `{"job":"CAE","attempt":1}`, `{"job":"CAE=","model_dir":"a\u00e9"}`,
		`{"job":"CAE=","model_dir":"` + "\xff" + `"}`, `{"job":"CAE=","attempt":1,"attempt":2}`, `{"job":"CAE="}x`,
		`{"job":"CAE=","unknown":1}`, `{"job":"CAE=","excluded":["a","b",]}`, `{"job":"CAE=","delta":true}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// checkAsJSON fails t unless decode reads b as json.Unmarshal does (the
// same record, or an error for both), and direct, the direct parse that
// decode tries first, takes nothing that encoding/json refuses. It reports
// whether direct took b.
func checkAsJSON[T any](t *testing.T, b []byte, direct func([]byte, *T) bool, decode func([]byte, *T) error) (took bool) {
	t.Helper()
	var got, want T
	took = direct(b, new(T))
	gotErr := decode(b, &got)
	wantErr := json.Unmarshal(b, &want)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded %+v, encoding/json %+v", b, got, want)
	}
	if took && wantErr != nil {
		t.Fatalf("%q: parsed directly, but encoding/json refuses it: %v", b, wantErr)
	}
	return took
}

// checkJobRecord is checkAsJSON of decodeJobRecord.
func checkJobRecord(t *testing.T, b []byte) (direct bool) {
	t.Helper()
	return checkAsJSON(t, b, decodeJobRecordDirect, decodeJobRecord)
}

// mutate is a copy of b with one to three bytes replaced, inserted or
// deleted, each new one from alphabet: what a direct parse sees of a
// damaged record, or of one nearly in json.Marshal's form.
func mutate(rng *rand.Rand, b, alphabet []byte) []byte {
	b = append([]byte(nil), b...)
	for range 1 + rng.IntN(3) {
		switch i := rng.IntN(len(b) + 1); rng.IntN(3) {
		case 0: // replace
			if i < len(b) {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		case 1: // insert
			b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
		default: // delete
			if i < len(b) {
				b = append(b[:i], b[i+1:]...)
			}
		}
	}
	return b
}

// TestDecodeJobRecordAsJSON checks the direct parse of job records against
// encoding/json: the records EncodeJob writes (which it must take), others
// (which it may leave to encoding/json) and random mutations of them.
func TestDecodeJobRecordAsJSON(t *testing.T) {
	t.Parallel()
	samples := jobRecordSamples(t)
	for i, b := range samples {
		// Records 0, 1, 2 and 5 are EncodeJob's of ordinary jobs (2 a
		// started multi-partition one) and a task (3 has escapes, 4 a null
		// protobuf).
		if direct := checkJobRecord(t, b); !direct && (i == 0 || i == 1 || i == 2 || i == 5) {
			t.Errorf("record %d as EncodeJob writes it (%q) left to encoding/json", i, b)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[]",:-.0129eEaAjobtu\ ` + "\x00\xc3\xa9\xff")
	for range 20000 {
		checkJobRecord(t, mutate(rng, samples[rng.IntN(len(samples))], alphabet))
	}
}

// FuzzDecodeJobRecord checks the direct parse against encoding/json on any
// input.
func FuzzDecodeJobRecord(f *testing.F) {
	for _, b := range jobRecordSamples(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkJobRecord(t, b) })
}
