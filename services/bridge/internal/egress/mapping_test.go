package egress

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json from the mapping")

// filler sets every field of a message, recursively, to a value no other
// field has: strings "<field>-<n>", numbers n, enums their last value, two
// elements per list and map. A value copied to the public event therefore
// says which internal field it came from.
type filler struct{ n int }

func (f *filler) next() int { f.n++; return f.n }

func (f *filler) fill(m protoreflect.Message, depth int) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		m.Set(m.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(1_780_000_000+int64(f.next())*61))
		return
	case "google.protobuf.Duration":
		m.Set(m.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(int64(f.next())))
		return
	case "google.protobuf.Value":
		m.Set(m.Descriptor().Fields().ByName("string_value"), protoreflect.ValueOfString(fmt.Sprintf("value-%d", f.next())))
		return
	case "google.protobuf.Struct", "google.protobuf.ListValue":
		return
	}
	if depth > 6 {
		return
	}
	oneofs := map[protoreflect.FullName]bool{}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if oneofs[o.FullName()] {
				continue
			}
			oneofs[o.FullName()] = true
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for j := 0; j < 2; j++ {
				k := f.scalar(fd.MapKey(), string(fd.Name())+"-key")
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v := mp.NewValue()
					f.fill(v.Message(), depth+1)
					mp.Set(k.MapKey(), v)
				} else {
					mp.Set(k.MapKey(), f.scalar(fd.MapValue(), string(fd.Name())))
				}
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := 0; j < 2; j++ {
				if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
					v := l.NewElement()
					f.fill(v.Message(), depth+1)
					l.Append(v)
				} else {
					l.Append(f.scalar(fd, string(fd.Name())))
				}
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			f.fill(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, f.scalar(fd, string(fd.Name())))
		}
	}
}

func (f *filler) scalar(fd protoreflect.FieldDescriptor, name string) protoreflect.Value {
	n := f.next()
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-%d", name, n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("%s-%d", name, n)))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.25)
	}
	panic("filler: kind " + fd.Kind().String())
}

// full returns p with every field set (filler), then fix applied: fix
// makes the names valid resource names, as a real event's are.
func full[T proto.Message](p T, fix func(T)) T {
	(&filler{}).fill(p.ProtoReflect(), 0)
	fix(p)
	return p
}

// goldenCases are every mapped internal type, every field populated.
func goldenCases() []proto.Message {
	return []proto.Message{
		full(&eventsv1.JobChanged{}, func(e *eventsv1.JobChanged) {
			e.Job.Name, e.Job.Cluster = "projects/golden/jobs/41", "projects/golden/clusters/c1"
		}),
		full(&eventsv1.CustomJobChanged{}, func(e *eventsv1.CustomJobChanged) {
			e.CustomJob.Name = "projects/golden/locations/us-central1/customJobs/42"
		}),
		full(&eventsv1.HyperparameterTuningJobChanged{}, func(e *eventsv1.HyperparameterTuningJobChanged) {
			e.TuningJob.Name = "projects/golden/locations/us-central1/hyperparameterTuningJobs/43"
		}),
		full(&eventsv1.TrialChanged{}, func(e *eventsv1.TrialChanged) {
			e.TuningJob = "projects/golden/locations/us-central1/hyperparameterTuningJobs/43"
			e.Trial.State = trainingv1.Trial_SUCCEEDED
		}),
		full(&eventsv1.ModelVersionRegistered{}, func(e *eventsv1.ModelVersionRegistered) {
			e.Model, e.Version.Name = "projects/golden/models/m", "projects/golden/models/m/versions/3"
		}),
		full(&eventsv1.NodeHealthChanged{}, func(e *eventsv1.NodeHealthChanged) {
			e.Node, e.Cluster = "projects/golden/clusters/c1/nodes/gpu-0001", "projects/golden/clusters/c1"
		}),
		full(&eventsv1.NodeChanged{}, func(e *eventsv1.NodeChanged) {
			e.Node.Name, e.Node.Cluster = "projects/golden/clusters/c1/nodes/gpu-0002", "projects/golden/clusters/c1"
		}),
		full(&eventsv1.NodeRemoved{}, func(e *eventsv1.NodeRemoved) {
			e.Node, e.Cluster = "projects/golden/clusters/c1/nodes/gpu-0003", "projects/golden/clusters/c1"
		}),
	}
}

func internal(p proto.Message, id string) envelope.Event {
	return envelope.Event{ID: id, Type: envelope.TypeOf(p), Source: "loom/x", Subject: "s",
		Time: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Payload: p}
}

// publicView is a public event as the golden file holds it.
type publicView struct {
	ID, Source, Type, Subject, Time, Project string
	Data                                     any
}

func view(t *testing.T, ce cloudevent.Event) publicView {
	t.Helper()
	var data any
	if err := json.Unmarshal(ce.Data, &data); err != nil {
		t.Fatalf("%s data is not JSON: %v", ce.Type, err)
	}
	return publicView{ID: ce.ID, Source: ce.Source, Type: ce.Type, Subject: ce.Subject,
		Time: ce.Time.Format(time.RFC3339Nano), Project: ce.Extensions[cloudevent.ExtProject], Data: data}
}

// secretFields are internal fields that must never reach a public event,
// whatever the mapping becomes: scripts, commands, environments, sealed
// data, internal paths and who asked.
var secretFields = map[protoreflect.Name]bool{"script": true, "command": true, "env": true, "sealed": true,
	"work_dir": true, "output_path": true, "error_path": true, "model_dir": true, "submit_host": true, "script_path": true,
	"set_by": true, "request_id": true, "placement": true, "checkpoint_uri": true, "job_spec": true,
	"trial_job_spec": true, "study_spec": true, "web_access_uris": true, "nodes": true, "batch_host": true,
	"env_var": true, "args": true, "image_uri": true}

// secretValues collects the string values of m's secretFields, anywhere in it.
func secretValues(m protoreflect.Message, under bool, out map[string]string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		s := under || secretFields[fd.Name()]
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if s {
					out[k.String()] = string(fd.FullName())
				}
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					secretValues(mv.Message(), s, out)
				} else if s {
					out[mv.String()] = string(fd.FullName())
				}
				return true
			})
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				if fd.Kind() == protoreflect.MessageKind {
					secretValues(v.List().Get(i).Message(), s, out)
				} else if s && fd.Kind() == protoreflect.StringKind {
					out[v.List().Get(i).String()] = string(fd.FullName())
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			secretValues(v.Message(), s, out)
		case s && fd.Kind() == protoreflect.StringKind:
			out[v.String()] = string(fd.FullName())
		}
		return true
	})
}

// TestGolden maps every mapped internal event with every field populated
// and compares the public events with testdata/golden.json: a new internal
// field, or a mapping that starts copying one, changes the output and fails
// here until the golden file is rewritten (-update) and reviewed.
func TestGolden(t *testing.T) {
	t.Parallel()
	got := map[string]publicView{}
	for i, p := range goldenCases() {
		typ := envelope.TypeOf(p)
		m, ok, err := Map(internal(p, fmt.Sprintf("01GOLDEN%02d", i)))
		if err != nil || !ok {
			t.Fatalf("%s: mapped %v, %v", typ, ok, err)
		}
		if err := m.Event.Validate(cloudevent.DefaultMaxData); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		secrets := map[string]string{}
		secretValues(p.ProtoReflect(), false, secrets)
		for v, field := range secrets {
			if bytes.Contains(m.Event.Data, []byte(`"`+v+`"`)) {
				t.Errorf("%s: internal field %s (%q) reached the public event: %s", typ, field, v, m.Event.Data)
			}
		}
		got[typ] = view(t, m.Event)
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join("testdata", "golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
	}
	if !bytes.Equal(want, b) {
		t.Errorf("public events differ from %s (review, then -update):\n%s", path, b)
	}
}

// TestEveryMappedTypeHasAGoldenCase keeps TestGolden complete.
func TestEveryMappedTypeHasAGoldenCase(t *testing.T) {
	t.Parallel()
	have := map[string]bool{}
	for _, p := range goldenCases() {
		have[envelope.TypeOf(p)] = true
	}
	for typ := range mappings {
		if !have[typ] {
			t.Errorf("%s has a mapping but no golden case", typ)
		}
	}
}

// TestEveryPublicMessageHasAMapping: every loom.public.v1 message is
// something Loom publishes (IngressResult by the ingress).
func TestEveryPublicMessageHasAMapping(t *testing.T) {
	t.Parallel()
	produced := map[string]bool{typeOf(&publicv1.IngressResult{}): true}
	for _, mp := range mappings {
		produced[mp.public] = true
	}
	n := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("loom.public.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Messages().Len(); i++ {
			n++
			if name := string(fd.Messages().Get(i).FullName()); !produced[name] {
				t.Errorf("%s is in the public contract but nothing publishes it", name)
			}
		}
		return true
	})
	if n < 8 {
		t.Fatalf("found %d loom.public.v1 messages, want at least 8", n)
	}
}

func TestMapIsDeterministicAndSkipsWhatIsNotPublic(t *testing.T) {
	t.Parallel()
	job := &eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: "projects/p/jobs/1", State: loomv1.JobState_RUNNING}}
	a, ok, err := Map(internal(job, "01A"))
	if err != nil || !ok {
		t.Fatalf("map: %v %v", ok, err)
	}
	b, _, _ := Map(internal(job, "01A"))
	c, _, _ := Map(internal(job, "01B"))
	if a.Event.ID != b.Event.ID || a.Event.ID == c.Event.ID || len(a.Event.ID) != 32 {
		t.Fatalf("ids: same event %q/%q, other %q", a.Event.ID, b.Event.ID, c.Event.ID)
	}
	if a.Project != "p" || a.Event.Extensions[cloudevent.ExtProject] != "p" || a.Event.Source != "loom/scheduler" ||
		a.Event.Subject != "projects/p/jobs/1" || a.StateToken != "RUNNING/1" {
		t.Fatalf("mapped: %+v", a)
	}
	running := &eventsv1.TrialChanged{TuningJob: "projects/p/locations/l/hyperparameterTuningJobs/3", Trial: &trainingv1.Trial{Id: "1", State: trainingv1.Trial_ACTIVE}}
	if _, ok, err := Map(internal(running, "01C")); ok || err != nil {
		t.Fatalf("an active trial is not finished: %v %v", ok, err)
	}
	if _, ok, err := Map(internal(&eventsv1.NodeDrained{Node: "n"}, "01D")); ok || err != nil {
		t.Fatalf("NodeDrained has no public form: %v %v", ok, err)
	}
	bad := &eventsv1.JobChanged{Job: &loomv1.Job{Name: "jobs/1", State: loomv1.JobState_RUNNING}}
	if _, _, err := Map(internal(bad, "01E")); err == nil || !strings.Contains(err.Error(), "projects/{project}") {
		t.Fatalf("a job without a project: %v", err)
	}
	health := &eventsv1.NodeHealthChanged{Node: "gpu-1", Cluster: "projects/q/clusters/c", Health: eventsv1.NodeHealth_UNHEALTHY}
	if m, ok, err := Map(internal(health, "01F")); err != nil || !ok || m.Project != "q" {
		t.Fatalf("a node's project comes from its cluster: %+v %v %v", m, ok, err)
	}
}

// TestJobStateChangedCarriesTheExitSignal: the public event says how the
// job's program ended apart from its code, as the job does (exit_signal): a
// program killed by SIGKILL is 137 with signal 9, one that exited 137 by
// itself is signal 0 (present in the JSON), and a job whose end was no
// program's (the scheduler did not learn a signal) leaves it out.
func TestJobStateChangedCarriesTheExitSignal(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name     string
		sig      *int32
		wantJSON string
	}{
		{"killed by signal 9", proto.Int32(9), `"exitSignal":9`},
		{"exited 137 by itself", proto.Int32(0), `"exitSignal":0`},
		{"no program's end", nil, ""},
	} {
		job := &eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: "projects/p/jobs/1", State: loomv1.JobState_FAILED, ExitCode: 137, ExitSignal: tc.sig}}
		m, ok, err := Map(internal(job, fmt.Sprintf("01X%d", i)))
		if err != nil || !ok {
			t.Fatalf("map: %v %v", ok, err)
		}
		pub := m.Payload.(*publicv1.JobStateChanged)
		if (pub.ExitSignal == nil) != (tc.sig == nil) || (tc.sig != nil && pub.GetExitSignal() != *tc.sig) || pub.GetExitCode() != 137 {
			t.Errorf("%s: public exit_code %d exit_signal %v", tc.name, pub.GetExitCode(), pub.ExitSignal)
		}
		data := strings.ReplaceAll(string(m.Event.Data), " ", "")
		if tc.wantJSON != "" && !strings.Contains(data, tc.wantJSON) || tc.wantJSON == "" && strings.Contains(data, "exitSignal") {
			t.Errorf("%s: data %s, want %q", tc.name, m.Event.Data, tc.wantJSON)
		}
	}
}
