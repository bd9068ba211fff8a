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
// error beside it; the guard's interceptors answer that error.
//
// The answer is a refusal like any other, so it comes where the others
// do: after the audit, authentication and the rate limit (which then
// record and count it against the caller's principal, known by then:
// authentication reads the call's metadata, not its request), before
// authorization and anything else that reads the request. Two pairs of
// interceptors do it: ServerOptions' (first in the chain) take the error
// out of the guard as soon as the request is seen, so that one is never
// left behind however the call ends, and carry it in the call's context;
// Unary and Stream (placed after the rate limit) answer it.
//
// Make one with NewDecodeGuard, give its ServerOptions to the server, and
// Unary and Stream to the chain.
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
// for every request (grpc.ForceServerCodecV2) and the interceptors that
// take a decode error into the call's context. Give them before any other
// interceptor (the chains run in the order their options are given).
// Without Unary and Stream later in the chain a request that does not
// decode reaches the handler empty.
func (g *DecodeGuard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(guardCodec{g}),
		grpc.ChainUnaryInterceptor(g.takeUnary),
		grpc.ChainStreamInterceptor(g.takeStream),
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

// decodeFailed holds a call's decode error from the first interceptor
// that saw it to the one that answers it.
type decodeFailed struct {
	mu  sync.Mutex
	err error
}

type decodeFailedKey struct{}

func (d *decodeFailed) set(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

func (d *decodeFailed) take() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.err
	d.err = nil
	return err
}

func (g *DecodeGuard) takeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.take(req); err != nil {
		d := &decodeFailed{err: err}
		ctx = context.WithValue(ctx, decodeFailedKey{}, d)
	}
	return h(ctx, req)
}

func (g *DecodeGuard) takeStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	d := &decodeFailed{}
	return h(srv, takingStream{ss, g, d, context.WithValue(ss.Context(), decodeFailedKey{}, d)})
}

// Unary answers a unary call whose request did not decode with its
// InvalidArgument. Place it in the chain after authentication and the
// rate limit, before authorization.
func (g *DecodeGuard) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if d, ok := ctx.Value(decodeFailedKey{}).(*decodeFailed); ok {
		if err := d.take(); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	return h(ctx, req)
}

// Stream answers each message of a stream that did not decode, as the
// handler receives it, with its InvalidArgument. Place it in the chain
// after authentication and the rate limit, before authorization.
func (g *DecodeGuard) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	d, ok := ss.Context().Value(decodeFailedKey{}).(*decodeFailed)
	if !ok {
		return h(srv, ss)
	}
	return h(srv, answeringStream{ss, d})
}

// takingStream is a ServerStream that takes each received message's
// decode error out of the guard into d, for answeringStream to answer:
// the message received here may be copied before the handler gets it
// (the audit interceptor receives a server stream's request itself).
type takingStream struct {
	grpc.ServerStream
	g   *DecodeGuard
	d   *decodeFailed
	ctx context.Context
}

func (s takingStream) Context() context.Context { return s.ctx }

func (s takingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.g.take(m); err != nil {
		s.d.set(err)
	}
	return nil
}

// answeringStream is a ServerStream whose RecvMsg answers the decode
// error of the message it received.
type answeringStream struct {
	grpc.ServerStream
	d *decodeFailed
}

func (s answeringStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.d.take(); err != nil {
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
