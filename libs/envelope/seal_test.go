package envelope_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

const (
	sealNode  = "clusters/c1/nodes/gpu-0001"
	otherNode = "clusters/c1/nodes/gpu-0002"
	secretEnv = "hunter2-the-db-password"
)

var sealSecret = bytes.Repeat([]byte{7}, 32)

func startStep() *eventsv1.StartStep {
	return &eventsv1.StartStep{Job: "projects/p/jobs/1", JobId: "1", Attempt: 2, Node: sealNode, NodeIndex: 0,
		Command: []string{"/bin/sh", "-c", "echo run"}, Script: "#!/bin/sh\necho secret-script\n",
		Env: map[string]string{"DB_PASSWORD": secretEnv, "SLURM_NNODES": "1"}, OutputPath: "/out", User: "alice"}
}

func launchTasks() *eventsv1.LaunchTasks {
	return &eventsv1.LaunchTasks{Job: "projects/p/jobs/1", JobId: "1", Attempt: 2, StepId: 3, Node: sealNode,
		Ntasks: 2, Command: []string{"/bin/echo", "task"}, Env: map[string]string{"TOKEN": secretEnv}, User: "alice"}
}

func seal(t *testing.T, key []byte, m proto.Message) proto.Message {
	t.Helper()
	s, err := envelope.SealCommand(key, m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealCommandRoundTrip(t *testing.T) {
	t.Parallel()
	key := auth.CommandKey(sealSecret, sealNode, "")
	for _, m := range []proto.Message{startStep(), launchTasks(), &eventsv1.StartStep{Job: "j", Node: sealNode}} {
		orig := proto.Clone(m)
		sealed := seal(t, key, m)
		if !proto.Equal(m, orig) {
			t.Fatalf("SealCommand changed its argument: %v", m)
		}
		if !envelope.IsSealed(sealed) {
			t.Fatalf("%v is not sealed", sealed)
		}
		raw, err := proto.Marshal(sealed)
		if err != nil {
			t.Fatal(err)
		}
		for _, plain := range []string{secretEnv, "secret-script", "DB_PASSWORD", "/bin/echo", "echo run"} {
			if bytes.Contains(raw, []byte(plain)) {
				t.Fatalf("sealed %s still holds %q in the clear", proto.MessageName(m), plain)
			}
		}
		// What stays visible: the metadata the agent and operators route by.
		if s, ok := sealed.(*eventsv1.StartStep); ok && (s.GetNode() != sealNode || s.GetJob() == "" || s.GetCommand() != nil || s.GetEnv() != nil) {
			t.Fatalf("sealed StartStep: %v", s)
		}
		opened, err := envelope.OpenCommand(key, sealed)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(opened, orig) {
			t.Fatalf("opened %v, want %v", opened, orig)
		}
	}
}

func TestOpenCommandRefuses(t *testing.T) {
	t.Parallel()
	key := auth.CommandKey(sealSecret, sealNode, "")
	sealed := seal(t, key, startStep()).(*eventsv1.StartStep)
	sealedTasks := seal(t, key, launchTasks()).(*eventsv1.LaunchTasks)
	mod := func(f func(s *eventsv1.StartStep)) proto.Message {
		c := proto.Clone(sealed).(*eventsv1.StartStep)
		f(c)
		return c
	}
	cases := []struct {
		name   string
		key    []byte
		cmd    proto.Message
		reason string
	}{
		{"another node's key", auth.CommandKey(sealSecret, otherNode, ""), sealed, envelope.ReasonBadSeal},
		{"another services' secret", auth.CommandKey(bytes.Repeat([]byte{8}, 32), sealNode, ""), sealed, envelope.ReasonBadSeal},
		{"moved to another node's command", key, mod(func(s *eventsv1.StartStep) { s.Node = otherNode }), envelope.ReasonBadSeal},
		{"moved to another attempt", key, mod(func(s *eventsv1.StartStep) { s.Attempt++ }), envelope.ReasonBadSeal},
		{"moved to another job", key, mod(func(s *eventsv1.StartStep) { s.Job = "projects/p/jobs/2" }), envelope.ReasonBadSeal},
		{"moved to another step", key, func() proto.Message {
			c := proto.Clone(sealedTasks).(*eventsv1.LaunchTasks)
			c.StepId++
			return c
		}(), envelope.ReasonBadSeal},
		{"moved to another message type", key, &eventsv1.LaunchTasks{Job: sealed.Job, Attempt: sealed.Attempt, Node: sealNode, StepId: -1, Sealed: sealed.Sealed}, envelope.ReasonBadSeal},
		{"a changed byte", key, mod(func(s *eventsv1.StartStep) { s.Sealed[len(s.Sealed)-1] ^= 1 }), envelope.ReasonBadSeal},
		{"a changed nonce", key, mod(func(s *eventsv1.StartStep) { s.Sealed[3] ^= 1 }), envelope.ReasonBadSeal},
		{"truncated", key, mod(func(s *eventsv1.StartStep) { s.Sealed = s.Sealed[:10] }), envelope.ReasonBadSeal},
		{"another version", key, mod(func(s *eventsv1.StartStep) { s.Sealed[0] = 9 }), envelope.ReasonBadSeal},
		{"sealed with a script in the clear too", key, mod(func(s *eventsv1.StartStep) { s.Script = "rm -rf /" }), envelope.ReasonBadSeal},
		{"no key", nil, sealed, envelope.ReasonNoCommandKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := envelope.OpenCommand(c.key, c.cmd)
			if err == nil || envelope.ReasonOf(err) != c.reason {
				t.Fatalf("OpenCommand = %v, %v; want a rejection %q", got, err, c.reason)
			}
		})
	}
}

func TestSealCommandPassesOthers(t *testing.T) {
	t.Parallel()
	key := auth.CommandKey(sealSecret, sealNode, "")
	stop := &eventsv1.StopStep{Job: "j", Node: sealNode}
	if got, err := envelope.SealCommand(key, stop); err != nil || got != proto.Message(stop) {
		t.Fatalf("SealCommand(StopStep) = %v, %v; want it as is", got, err)
	}
	plain := startStep()
	if got, err := envelope.OpenCommand(nil, plain); err != nil || got != proto.Message(plain) {
		t.Fatalf("OpenCommand(unsealed) = %v, %v; want it as is", got, err)
	}
	if _, err := envelope.SealCommand(nil, startStep()); err == nil {
		t.Fatal("SealCommand with no key succeeded")
	}
	if _, err := envelope.SealCommand(key, seal(t, key, startStep())); err == nil {
		t.Fatal("SealCommand of a sealed command succeeded")
	}
	a, b := seal(t, key, startStep()).(*eventsv1.StartStep), seal(t, key, startStep()).(*eventsv1.StartStep)
	if bytes.Equal(a.Sealed, b.Sealed) {
		t.Fatal("two seals of one command are equal: the nonce is not fresh")
	}
	if bytes.Equal(auth.CommandKey(sealSecret, sealNode, ""), auth.CommandKey(sealSecret, otherNode, "")) {
		t.Fatal("two nodes share a command key")
	}
}

// FuzzOpenCommand: whatever the sealed bytes and the fields they are bound
// to, OpenCommand neither panics nor opens anything but a blob sealed for
// exactly that command, into exactly what was sealed.
func FuzzOpenCommand(f *testing.F) {
	key := auth.CommandKey(sealSecret, sealNode, "")
	good, err := envelope.SealCommand(key, startStep())
	if err != nil {
		f.Fatal(err)
	}
	g := good.(*eventsv1.StartStep)
	f.Add(g.Sealed, g.Node, g.Attempt)
	f.Add([]byte{1}, sealNode, int32(2))
	f.Add([]byte{}, "", int32(0))
	f.Fuzz(func(t *testing.T, blob []byte, node string, attempt int32) {
		c := proto.Clone(g).(*eventsv1.StartStep)
		c.Sealed, c.Node, c.Attempt = blob, node, attempt
		opened, err := envelope.OpenCommand(key, c)
		if err != nil {
			if r := envelope.ReasonOf(err); r != envelope.ReasonBadSeal {
				t.Fatalf("reason %q for %v", r, err)
			}
			return
		}
		// Only a blob sealed for this very command opens (the seeds are
		// sealed anew in each fuzzing process: compare contents, not bytes).
		if len(blob) > 0 && !proto.Equal(opened, startStep()) {
			t.Fatalf("opened a command that was not sealed so: %v", opened)
		}
	})
}

// BenchmarkSealCommand is what the scheduler adds per StartStep it writes
// (key derivation included).
func BenchmarkSealCommand(b *testing.B) {
	cmd := startStep()
	for i := 0; i < 20; i++ {
		cmd.Env[fmt.Sprintf("SLURM_VAR_%d", i)] = "some value of a usual length"
	}
	for b.Loop() {
		if _, err := envelope.SealCommand(auth.CommandKey(sealSecret, sealNode, ""), cmd); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenCommand is what the agent adds per StartStep it reads.
func BenchmarkOpenCommand(b *testing.B) {
	cmd := startStep()
	for i := 0; i < 20; i++ {
		cmd.Env[fmt.Sprintf("SLURM_VAR_%d", i)] = "some value of a usual length"
	}
	key := auth.CommandKey(sealSecret, sealNode, "")
	sealed, err := envelope.SealCommand(key, cmd)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := envelope.OpenCommand(key, sealed); err != nil {
			b.Fatal(err)
		}
	}
}
