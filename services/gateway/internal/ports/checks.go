package ports

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
)

// CheckRequest checks what any request may hold, whatever its RPC, with
// the rule every handler and owner would apply, so that it is applied in
// one place and to every RPC, those passed on to their owner unread
// included: a page_size (AIP-158) is paging.CheckSize's, not negative.
// A violation is InvalidArgument naming the field and the limit.
func CheckRequest(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	var v errs.Validator
	r := m.ProtoReflect()
	if fd := r.Descriptor().Fields().ByName("page_size"); fd != nil && fd.Kind() == protoreflect.Int32Kind && fd.Cardinality() != protoreflect.Repeated {
		paging.CheckSize(&v, int32(r.Get(fd).Int()))
	}
	return v.Err()
}

// CheckUnary is the interceptor that applies CheckRequest to unary calls.
// It runs after authorization: a caller who may not make the call learns
// nothing from it.
func CheckUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := CheckRequest(req); err != nil {
		return nil, errs.ToStatus(err)
	}
	return h(ctx, req)
}

// CheckStream is the interceptor that applies CheckRequest to each
// message a stream receives.
func CheckStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, checkedStream{ss})
}

// checkedStream is a ServerStream whose received messages CheckRequest has checked.
type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := CheckRequest(m); err != nil {
		return errs.ToStatus(err)
	}
	return nil
}
