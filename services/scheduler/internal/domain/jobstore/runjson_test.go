package jobstore

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomValue fills v (settable) with a random value of its type, every
// field of every struct reached included: nil, empty and full slices, maps
// and pointers; extreme integers; times in UTC, in a fixed zone and with
// nanoseconds. Strings come from a plain alphabet unless odd, which adds
// what json.Marshal escapes.
func randomValue(rng *rand.Rand, v reflect.Value, odd bool) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		var t time.Time
		switch rng.IntN(4) {
		case 0: // zero
		case 1:
			t = time.Unix(rng.Int64N(4e9), 0).UTC()
		case 2:
			t = time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(time.FixedZone("", 3600*(rng.IntN(27)-12)))
		default:
			t = time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).UTC()
		}
		v.Set(reflect.ValueOf(t))
		return
	}
	switch v.Kind() {
	case reflect.String:
		alphabet := []rune("abcXYZ019-_/.:# é")
		if odd {
			alphabet = append(alphabet, '"', '\\', '\n', '<', '&', '\u2028', 0)
		}
		s := make([]rune, rng.IntN(12))
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		v.SetString(string(s))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		switch rng.IntN(5) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(-1 << (bits - 1))
		case 2:
			v.SetInt(1<<(bits-1) - 1)
		default:
			v.SetInt(rng.Int64N(2000) - 1000)
		}
	case reflect.Float64:
		v.SetFloat([]float64{0, 12.5, 1e-9, 1e22, -3.25, math.MaxFloat64, rng.Float64() * 100}[rng.IntN(7)])
	case reflect.Pointer:
		if rng.IntN(3) == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		randomValue(rng, v.Elem(), odd)
	case reflect.Slice:
		switch n := rng.IntN(5); n {
		case 0: // nil
		default:
			v.Set(reflect.MakeSlice(v.Type(), n-1, n-1))
			for i := range n - 1 {
				randomValue(rng, v.Index(i), odd)
			}
		}
	case reflect.Map:
		switch n := rng.IntN(5); n {
		case 0: // nil
		default:
			v.Set(reflect.MakeMap(v.Type()))
			for range n - 1 {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				randomValue(rng, k, odd)
				randomValue(rng, e, odd)
				v.SetMapIndex(k, e)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				randomValue(rng, v.Field(i), odd)
			}
		}
	default:
		panic("randomValue: no generator for " + v.Type().String())
	}
}

// runRecordSamples are stored run records: random ones as json.Marshal
// writes them (every field of every nested type set in some), and some it
// does not write.
func runRecordSamples(t testing.TB, rng *rand.Rand, n int) [][]byte {
	var out [][]byte
	for i := range n {
		var r RunRecord
		randomValue(rng, reflect.ValueOf(&r).Elem(), i%4 == 3)
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, s := range []string{
		`{}`, `null`, `{"job":"a"}`, `{"job":"a","nodes":[],"steps":{}}`, `{"job":"a","nodes":null,"steps":null}`,
		`{"Job":"a"}`, `{"cluster":"c","job":"a"}`, `{"job":"a","job":"b"}`, `{"job":"a" }`, `{"job":"a"}x`,
		`{"job":"a","unknown":1}`, `{"attempt":1.0}`, `{"attempt":1e2}`, `{"attempt":01}`, `{"attempt":2147483648}`,
		`{"attempt":-2147483649}`, `{"attempt":-0}`, `{"mem_mb":9223372036854775808}`, `{"mem_mb":-9223372036854775808}`,
		`{"mem_mb":99999999999999999999}`, `{"job":"\u0061"}`, `{"job":"` + "\xff" + `"}`, `{"nodes":["a",]}`,
		`{"steps":{"n":{"state":1},"n":{"exit_code":2}}}`, `{"steps":{"n":null}}`, `{"gpus":{"n":null,"m":[]}}`,
		`{"start":"2020-01-01T00:00:00Z"}`, `{"start":"2020-13-01T00:00:00Z"}`, `{"start":null}`, `{"start":"x"}`,
		`{"start":"2020-01-01T00:00:00+01:00"}`, `{"exit_signal":null}`, `{"exit_signal":3}`,
		`{"progress":{"step":1},"progress":{"last":"2020-01-01T00:00:00Z"}}`, `{"progress":{}}`,
		`{"job_steps":[{"parts":[{"usage":[{"gpu_util":1E400}]}]}]}`, `{"job_steps":[{"parts":[{"usage":[{"gpu_util":-0.5e-3}]}]}]}`,
		`{"job_steps":[{"parts":[{"usage":[{"gpu_util":.5}]}]}]}`, `{"job_steps":[{"parts":[{"usage":[{"gpu_util":1.}]}]}]}`,
		`{"job_steps":[{"gpus":[null,[],[1]]}]}`, `{"released":false}`, `{"released":nul}`, `{"job":"a","cluster":"c"`,
		`{"steps":{"n":{"usage":{"gpus":9223372036854775807}}}}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// checkRun is checkAsJSON of DecodeRun.
func checkRun(t *testing.T, b []byte) (direct bool) {
	t.Helper()
	return checkAsJSON(t, b, decodeRunDirect, DecodeRun)
}

// TestDecodeRunAsJSON checks the direct parse of run records against
// encoding/json: random records as json.Marshal writes them (which it must
// take unless they hold an escape, and which must read back to the same
// bytes), others, and random mutations of them.
func TestDecodeRunAsJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	samples := runRecordSamples(t, rng, 2000)
	for _, b := range samples[:2000] {
		direct := checkRun(t, b)
		if !direct && !bytes.Contains(b, []byte(`\`)) {
			t.Fatalf("a record as json.Marshal writes it, without escapes, left to encoding/json: %s", b)
		}
		var r RunRecord
		if err := DecodeRun(b, &r); err != nil {
			t.Fatal(err)
		}
		if back, err := json.Marshal(&r); err != nil || !bytes.Equal(back, b) {
			t.Fatalf("%s\nreads back as\n%s (%v)", b, back, err)
		}
	}
	for _, b := range samples[2000:] {
		checkRun(t, b)
	}
	alphabet := []byte(`{}[]",:-.0129eEaAjobtu\ nl` + "\x00\xc3\xa9\xff")
	for range 20000 {
		checkRun(t, mutate(rng, samples[rng.IntN(len(samples))], alphabet))
	}
}

// TestDecodeRunEveryField checks that the direct parse knows every field
// json.Marshal writes of a run: a record with all of them set (no escapes)
// is parsed directly. A field added to RunRecord, or to a type it holds,
// fails this until the parse reads it (the record would still decode, by
// encoding/json, but slowly).
func TestDecodeRunEveryField(t *testing.T) {
	t.Parallel()
	var full func(v reflect.Value)
	full = func(v reflect.Value) {
		switch {
		case v.Type() == reflect.TypeFor[time.Time]():
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
		case v.Kind() == reflect.String:
			v.SetString("s")
		case v.Kind() == reflect.Bool:
			v.SetBool(true)
		case v.CanInt():
			v.SetInt(7)
		case v.Kind() == reflect.Float64:
			v.SetFloat(1.5)
		case v.Kind() == reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			full(v.Elem())
		case v.Kind() == reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			full(v.Index(0))
		case v.Kind() == reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
			e := reflect.New(v.Type().Elem()).Elem()
			full(e)
			v.SetMapIndex(reflect.ValueOf("k"), e)
		case v.Kind() == reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					full(v.Field(i))
				}
			}
		default:
			t.Fatalf("no value for %s", v.Type())
		}
	}
	var r RunRecord
	full(reflect.ValueOf(&r).Elem())
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	if !checkRun(t, b) {
		t.Fatalf("a run with every field set is left to encoding/json: %s", b)
	}
}

// FuzzDecodeRun checks the direct parse against encoding/json on any input.
func FuzzDecodeRun(f *testing.F) {
	for _, b := range runRecordSamples(f, rand.New(rand.NewPCG(5, 6)), 20) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkRun(t, b) })
}

// BenchmarkDecodeRun times the decoding of a run record as a pass leaves
// one (a running one-node job), directly and by encoding/json.
//
//	go test -run '^$' -bench DecodeRun ./internal/domain/jobstore/
func BenchmarkDecodeRun(b *testing.B) {
	rec := []byte(`{"job":"projects/sim/jobs/70","cluster":"projects/sim/clusters/sim","attempt":1,` +
		`"nodes":["projects/sim/clusters/sim/nodes/gpu-00025"],"hostnames":["gpu-00025"],` +
		`"gpus":{"projects/sim/clusters/sim/nodes/gpu-00025":[1,2,3,4,5,6,7]},"cpus":[7],"tasks":[1],` +
		`"steps":{"projects/sim/clusters/sim/nodes/gpu-00025":{"state":1}},"partition":"batch","user":"user69",` +
		`"account":"acct9","qos":"normal","start":"2020-01-01T23:57:15Z"}`)
	if !decodeRunDirect(rec, &RunRecord{}) {
		b.Fatal("the record is left to encoding/json")
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			var r RunRecord
			if err := DecodeRun(rec, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var r RunRecord
			if err := json.Unmarshal(rec, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
