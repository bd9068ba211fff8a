// Package errs is Loom's error vocabulary and its one mapping to gRPC status
// codes. Domain code returns these kinds (wrapped with context as it likes);
// the gRPC layer turns them into codes in ToStatus, and nowhere else.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kinds of failure. Wrap them (fmt.Errorf("...: %w", errs.NotFound)) or use the
// constructors below.
var (
	NotFound           = errors.New("not found")
	AlreadyExists      = errors.New("already exists")
	FailedPrecondition = errors.New("failed precondition")
	Unavailable        = errors.New("unavailable")
	// PermissionDenied: the caller may not do this to this resource (a
	// user acting on another's job, a user releasing an admin hold).
	PermissionDenied = errors.New("permission denied")
	// Aborted: the operation was superseded by another (a create ended by a
	// delete of the same cluster).
	Aborted = errors.New("aborted")
	// Unauthenticated: the call carries no credential, or one that is
	// malformed, expired, revoked or unknown.
	Unauthenticated = errors.New("unauthenticated")
	// ResourceExhausted: a quota, limit or rate was hit; the message names
	// the limit and its value.
	ResourceExhausted = errors.New("resource exhausted")
)

// FieldViolation is one problem with one field of a request.
type FieldViolation struct {
	// Field is the path of the field, e.g. "job.node_count" or "compute.node_pools[1].id".
	Field string
	// Reason says what is wrong and, where it helps, what would be right.
	Reason string
}

// InvalidError lists every problem found in a request; it maps to InvalidArgument.
type InvalidError struct {
	Violations []FieldViolation
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Field + ": " + v.Reason
	}
	return strings.Join(parts, "; ")
}

// Invalid returns an InvalidError for one field.
func Invalid(field, reason string, args ...any) error {
	return &InvalidError{Violations: []FieldViolation{{Field: field, Reason: fmt.Sprintf(reason, args...)}}}
}

// MaxViolations is the most violations one InvalidError lists: a request of
// a million bad items (a 4 MiB list of hostnames, say) is answered with the
// first MaxViolations and a count of the rest, not with an answer larger
// than the request.
const MaxViolations = 100

// Validator collects field violations so that a request's problems are all
// reported at once (the first MaxViolations of them).
type Validator struct {
	violations []FieldViolation
	more       int
}

// Add records a violation of field; past MaxViolations it only counts it.
func (v *Validator) Add(field, reason string, args ...any) {
	if len(v.violations) >= MaxViolations {
		v.more++
		return
	}
	v.violations = append(v.violations, FieldViolation{Field: field, Reason: fmt.Sprintf(reason, args...)})
}

// Check records a violation of field when ok is false.
func (v *Validator) Check(ok bool, field, reason string, args ...any) {
	if !ok {
		v.Add(field, reason, args...)
	}
}

// Err returns an *InvalidError holding every violation (past MaxViolations,
// a last one, field "…", counting the rest), or nil when none.
func (v *Validator) Err() error {
	if len(v.violations) == 0 {
		return nil
	}
	out := v.violations
	if v.more > 0 {
		out = append(out[:len(out):len(out)], FieldViolation{Field: "…", Reason: fmt.Sprintf("%d more problems not listed", v.more)})
	}
	return &InvalidError{Violations: out}
}

// Hide marks err, a NotFound, as an answer given in place of a refusal: a
// resource the caller may not see (another project's, another user's)
// answered as one that does not exist, so that its existence does not
// leak. The caller gets exactly what err alone would give (its message,
// its code, no status detail): only Hidden reads the mark, for the
// gateway's audit trail, which records such a call as denied, not as a
// request for something that is not there. nil stays nil.
func Hide(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return &hiddenStatus{hiddenError{err}}
	}
	return &hiddenError{err}
}

// Hidden reports whether err carries Hide's mark, before or after
// ToStatus made a status of it.
func Hidden(err error) bool {
	var h interface{ hidden() }
	return errors.As(err, &h)
}

// hiddenError is Hide's mark on an error: its message and kind are err's.
type hiddenError struct{ err error }

func (e *hiddenError) Error() string { return e.err.Error() }
func (e *hiddenError) Unwrap() error { return e.err }
func (*hiddenError) hidden()         {}

// hiddenStatus is Hide's mark on a status error: grpc-go sends its
// GRPCStatus, the status err alone is, so the mark never reaches the wire.
type hiddenStatus struct{ hiddenError }

func (e *hiddenStatus) GRPCStatus() *status.Status {
	st, _ := status.FromError(e.err)
	return st
}

// ToStatus maps err to a gRPC status error. Errors that already carry a gRPC
// status keep it (its code and details); one wrapped with context
// (fmt.Errorf("ask the scheduler for ...: %w", err)) reads as that context
// and the status's own message, without grpc-go's "rpc error: code = ...
// desc = " between them. Unknown errors become Internal. Hide's mark
// stays on the status error it returns (Hidden), off the wire.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*hiddenStatus); ok {
		return err
	}
	if Hidden(err) {
		return Hide(toStatus(err))
	}
	return toStatus(err)
}

// toStatus is ToStatus without Hide's mark.
func toStatus(err error) error {
	if st, ok := status.FromError(err); ok {
		type carrier interface {
			error
			GRPCStatus() *status.Status
		}
		var inner carrier
		if _, direct := err.(carrier); direct || !errors.As(err, &inner) {
			return err
		}
		p := st.Proto()
		p.Message = strings.Replace(err.Error(), inner.Error(), inner.GRPCStatus().Message(), 1)
		return status.ErrorProto(p)
	}
	return status.Error(Code(err), err.Error())
}

// Code is the gRPC code of err's kind: the one mapping, used by ToStatus and
// by events that carry an outcome's code (ClusterOperationFailed), so that a
// domain names kinds and never codes. A status error keeps its code; nil is
// OK; an unknown error is Internal.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	var inv *InvalidError
	switch {
	case errors.As(err, &inv):
		return codes.InvalidArgument
	case errors.Is(err, NotFound):
		return codes.NotFound
	case errors.Is(err, AlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, FailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, Unavailable):
		return codes.Unavailable
	case errors.Is(err, PermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, Aborted):
		return codes.Aborted
	case errors.Is(err, Unauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, ResourceExhausted):
		return codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// UnaryServerInterceptor applies ToStatus to every unary handler's error.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	return resp, ToStatus(err)
}

// StreamServerInterceptor applies ToStatus to every streaming handler's error.
func StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return ToStatus(h(srv, ss))
}
