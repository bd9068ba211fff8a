package domain

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestShallowJobCopiesEveryField sets every field of a loomv1.Job (and an
// unknown one) and checks that shallowJob's copy equals it and shares its
// sub-messages: a field added to the proto and not to shallowJob fails here.
func TestShallowJobCopiesEveryField(t *testing.T) {
	t.Parallel()
	job := &loomv1.Job{}
	m := job.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(scalarOf(fd.MapKey()).MapKey(), scalarOf(fd.MapValue()))
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				l.Append(protoreflect.ValueOfMessage(l.NewElement().Message()))
			} else {
				l.Append(scalarOf(fd))
			}
		case fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd)
		default:
			m.Set(fd, scalarOf(fd))
		}
		if !m.Has(fd) {
			t.Fatalf("could not set %s", fd.Name())
		}
	}
	m.SetUnknown(protoreflect.RawFields{0xf8, 0xff, 0x3f, 0x01}) // field 1048575, varint 1
	cp := shallowJob(job)
	if !proto.Equal(cp, job) {
		t.Fatalf("shallowJob lost fields:\n got %v\nwant %v", cp, job)
	}
	if cp == job || cp.SubmitTime != job.SubmitTime || cp.Placement != job.Placement {
		t.Fatal("shallowJob must be a new message that shares the sub-messages")
	}
	cp.StateReason = "Changed"
	if job.StateReason == "Changed" {
		t.Fatal("a top-level field of the copy is the original's")
	}
}

// scalarOf is a value of fd's kind that is not its default.
func scalarOf(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(7)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	}
	return protoreflect.ValueOfString("x")
}
