package errs

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestToStatus(t *testing.T) {
	t.Parallel()
	var v Validator
	v.Check(false, "job.node_count", "must be at least 1, got %d", 0)
	v.Add("job.command", "required")
	cases := []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{v.Err(), codes.InvalidArgument, "job.node_count: must be at least 1, got 0; job.command: required"},
		{fmt.Errorf("job 7: %w", NotFound), codes.NotFound, "job 7: not found"},
		{fmt.Errorf("cluster c: %w", FailedPrecondition), codes.FailedPrecondition, "cluster c: failed precondition"},
		{fmt.Errorf("boom"), codes.Internal, "boom"},
		{status.Error(codes.Aborted, "x"), codes.Aborted, "x"},
	}
	for _, c := range cases {
		st := status.Convert(ToStatus(c.err))
		if st.Code() != c.code || st.Message() != c.msg {
			t.Errorf("ToStatus(%v) = %v %q, want %v %q", c.err, st.Code(), st.Message(), c.code, c.msg)
		}
	}
	if ToStatus(nil) != nil || (&Validator{}).Err() != nil {
		t.Fatal("nil error mapped to non-nil")
	}
}

// A downstream service's status error wrapped with context ("ask the
// scheduler for ...: %w") keeps its code and details, and its message reads
// as the context and the downstream's message, without grpc-go's "rpc
// error: code = NotFound desc = " in the middle: sinfo -M typo once said
// "slurm_load_partitions: ask the scheduler for the partitions of
// projects/p/clusters/typo: rpc error: code = NotFound desc = cluster
// projects/p/clusters/typo: not found".
func TestToStatusOfAWrappedStatus(t *testing.T) {
	t.Parallel()
	inner := status.New(codes.NotFound, "cluster projects/p/clusters/typo: not found")
	inner, err := inner.WithDetails(&errdetails.ResourceInfo{ResourceName: "projects/p/clusters/typo"})
	if err != nil {
		t.Fatal(err)
	}
	wrapped := fmt.Errorf("ask the scheduler for the partitions of projects/p/clusters/typo: %w", inner.Err())
	st := status.Convert(ToStatus(fmt.Errorf("outer: %w", wrapped)))
	want := "outer: ask the scheduler for the partitions of projects/p/clusters/typo: cluster projects/p/clusters/typo: not found"
	if st.Code() != codes.NotFound || st.Message() != want {
		t.Errorf("ToStatus = %v %q, want NotFound %q", st.Code(), st.Message(), want)
	}
	if d := st.Details(); len(d) != 1 || d[0].(*errdetails.ResourceInfo).GetResourceName() != "projects/p/clusters/typo" {
		t.Errorf("details = %v, want the downstream's", d)
	}
	// Unwrapped, a status error is passed on as it is.
	if got := ToStatus(inner.Err()); got != inner.Err() && status.Convert(got).Message() != inner.Message() {
		t.Errorf("ToStatus(status) = %v", got)
	}
}

// TestValidatorBoundsItsAnswer: a request with a million bad items is
// answered with MaxViolations of them and a count of the rest, not with an
// error larger than the request.
func TestValidatorBoundsItsAnswer(t *testing.T) {
	t.Parallel()
	var v Validator
	for i := range 1_000_000 {
		v.Add(fmt.Sprintf("hostnames[%d]", i), "not a hostname")
	}
	var inv *InvalidError
	if err := v.Err(); !errors.As(err, &inv) || len(inv.Violations) != MaxViolations+1 {
		t.Fatalf("Err() = %d violations, want %d and a count", len(inv.Violations), MaxViolations+1)
	}
	if last := inv.Violations[MaxViolations]; last.Field != "…" || last.Reason != "999900 more problems not listed" {
		t.Fatalf("last violation %+v", last)
	}
	if first := inv.Violations[0]; first.Field != "hostnames[0]" {
		t.Fatalf("first violation %+v", first)
	}
	var few Validator
	few.Add("a", "bad")
	if err := few.Err(); !errors.As(err, &inv) || len(inv.Violations) != 1 {
		t.Fatalf("one violation: %v", err)
	}
}

// TestHideMarksOffTheWire: a hidden NotFound is the same status as a plain
// one, byte for byte, and keeps its mark through ToStatus (both the
// gateway's ports and the server's last interceptor apply it).
func TestHideMarksOffTheWire(t *testing.T) {
	t.Parallel()
	plain := fmt.Errorf("job %s: %w", "projects/p/jobs/7", NotFound)
	wrappedStatus := fmt.Errorf("get job: %w", status.Error(codes.NotFound, "job 7: not found"))
	for _, err := range []error{plain, wrappedStatus, status.Error(codes.NotFound, "x: not found")} {
		hidden := Hide(err)
		if !Hidden(hidden) || Hidden(err) {
			t.Fatalf("Hidden(Hide(%v)) = %v, Hidden(%v) = %v", err, Hidden(hidden), err, Hidden(err))
		}
		if hidden.Error() != err.Error() || Code(hidden) != Code(err) {
			t.Errorf("Hide(%v) reads %q, %v; want %q, %v", err, hidden.Error(), Code(hidden), err.Error(), Code(err))
		}
		st := ToStatus(hidden)
		if !Hidden(st) || !Hidden(ToStatus(st)) {
			t.Errorf("ToStatus lost the mark of %v", err)
		}
		got, ok := status.FromError(ToStatus(st))
		if !ok {
			t.Fatalf("ToStatus(Hide(%v)) is no status: %T", err, st)
		}
		want, _ := status.FromError(ToStatus(err))
		gb, _ := proto.Marshal(got.Proto())
		wb, _ := proto.Marshal(want.Proto())
		if string(gb) != string(wb) || got.Code() != codes.NotFound {
			t.Errorf("hidden %v goes out as %v, want %v", err, got.Proto(), want.Proto())
		}
	}
	if Hide(nil) != nil || Hidden(nil) {
		t.Error("Hide(nil) is not nil")
	}
}
