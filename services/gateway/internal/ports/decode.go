package ports

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
)

// DecodeGuard makes a request that does not decode the caller's mistake:
// InvalidArgument naming the problem (and, for a message nested deeper
// than protobuf's recursion limit, the limit), where grpc-go answers
// Internal for any error of its codec. grpc-go wraps whatever the codec
// returns in codes.Internal ("grpc: failed to unmarshal the received
// message"), and decodes before any interceptor runs, so neither a codec
// nor an interceptor alone can change the code: the guard's codec reports
// success for a request that does not decode, empties it, and keeps its
// error beside it; the guard's interceptors, given the same message,
// answer that error before anything reads the request.
//
// Make one with NewDecodeGuard and give its ServerOptions to the server.
type DecodeGuard struct {
	inner encoding.CodecV2
	// failed holds the messages the codec could not decode (a pointer
	// each, so unique while held), with their error, until an
	// interceptor takes them out.
	failed sync.Map
}

// NewDecodeGuard returns a guard over grpc-go's protobuf codec.
func NewDecodeGuard() *DecodeGuard {
	return &DecodeGuard{inner: encoding.GetCodecV2(protocodec.Name)}
}

// ServerOptions are the server options that install the guard: its codec
// for every request (grpc.ForceServerCodecV2) and its interceptors. Give
// them before any other interceptor that reads a request (the chains run
// in the order their options are given).
func (g *DecodeGuard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(guardCodec{g}),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
}

// take returns the decode error of m, if it had one, and forgets it.
func (g *DecodeGuard) take(m any) error {
	if _, ok := m.(proto.Message); !ok {
		return nil
	}
	if err, ok := g.failed.LoadAndDelete(m); ok {
		return err.(error)
	}
	return nil
}

func (g *DecodeGuard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.take(req); err != nil {
		return nil, errs.ToStatus(err)
	}
	return h(ctx, req)
}

func (g *DecodeGuard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, guardedStream{ss, g})
}

// guardedStream is a ServerStream whose RecvMsg answers the decode error of
// the message it received.
type guardedStream struct {
	grpc.ServerStream
	g *DecodeGuard
}

func (s guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.g.take(m); err != nil {
		return errs.ToStatus(err)
	}
	return nil
}

// guardCodec is grpc-go's protobuf codec, whose decode errors are kept for
// the guard's interceptors rather than returned.
type guardCodec struct{ g *DecodeGuard }

func (c guardCodec) Marshal(v any) (mem.BufferSlice, error) { return c.g.inner.Marshal(v) }

func (c guardCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.g.inner.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	// Nothing half-decoded reaches a handler, should one run after all.
	proto.Reset(m)
	c.g.failed.Store(m, decodeError(m, err))
	return nil
}

// Name is the protobuf codec's: the guard replaces it, for every request.
func (c guardCodec) Name() string { return protocodec.Name }

// decodeError is the caller's error for a request m that did not decode.
func decodeError(m proto.Message, err error) error {
	name := m.ProtoReflect().Descriptor().FullName()
	// proto.Unmarshal's error has no exported sentinel; its text is
	// stable (google.golang.org/protobuf's errRecursionDepth).
	if strings.Contains(err.Error(), "exceeded maximum recursion depth") {
		return errs.Invalid("request", "%s nests messages deeper than protobuf's recursion limit of %d levels", name, protowire.DefaultRecursionLimit)
	}
	return errs.Invalid("request", "is not a valid %s in protobuf's binary encoding: %v", name, err)
}
