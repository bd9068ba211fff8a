package loomv1

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestClearOutputs sets every field of a Job and checks that ClearOutputs
// clears exactly the scheduler's.
func TestClearOutputs(t *testing.T) {
	t.Parallel()
	outputs := map[protoreflect.Name]bool{
		"state_reason": true, "exit_code": true, "nodes": true, "output_path": true, "error_path": true,
		"start_time": true, "end_time": true, "priority": true, "priority_factors": true, "placement": true,
		"expected_start_time": true, "sched_nodes": true, "restart_count": true, "runs": true, "batch_host": true,
		"alloc_gpus": true, "steps": true, "steps_omitted": true, "user_failures": true, "excluded_nodes": true,
		"exit_signal": true, "derived_exit_code": true, "derived_exit_signal": true, "cancelled_by": true,
		"hold_change_time": true, "node_tasks": true, "node_cpus": true,
	}
	j := &Job{}
	m := j.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := m.Mutable(fd).List()
			l.Append(l.NewElement())
		case fd.IsList() && fd.Kind() == protoreflect.Int32Kind:
			m.Mutable(fd).List().Append(protoreflect.ValueOfInt32(1))
		case fd.IsList():
			m.Mutable(fd).List().Append(protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd)
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		case fd.Kind() == protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(1))
		case fd.Kind() == protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(1))
		default:
			t.Fatalf("field %s of kind %v: teach this test to set it", fd.Name(), fd.Kind())
		}
	}
	j.ClearOutputs()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if m.Has(fd) == outputs[fd.Name()] {
			t.Errorf("field %s: set after ClearOutputs %v, an output %v", fd.Name(), m.Has(fd), outputs[fd.Name()])
		}
	}
}
