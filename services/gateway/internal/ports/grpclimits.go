package ports

import (
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// gRPC limits' defaults (the gateway's -grpc-* flags).
const (
	// DefaultGRPCMaxRecvBytes is the largest request message: grpc-go's
	// default, 4 MiB, which -rest-max-body matches.
	DefaultGRPCMaxRecvBytes = 4 << 20
	// DefaultGRPCKeepaliveMinTime is the shortest interval at which a
	// client may ping: grpc-go's default. A client that pings more often
	// (or, with no call open, more than once in 2h) is sent GOAWAY
	// (too_many_pings) at its third such ping and disconnected.
	DefaultGRPCKeepaliveMinTime = 5 * time.Minute
	// GRPCMaxHeaderListBytes bounds a call's metadata (HTTP/2 header list,
	// counted as HPACK does: name, value and 32 bytes a field): grpc-go's
	// default, 16 MiB, set here so that it is stated. It is not lower
	// because the REST port passes a request's headers on as metadata over
	// its loopback connection: net/http reads up to 1 MiB of them, and
	// 1 MiB of short headers counts several MiB; a lower bound would make
	// such a REST request a 500 instead of its answer.
	GRPCMaxHeaderListBytes = 16 << 20
)

// GRPCLimits bounds what a gRPC client may send and hold open. Zero fields
// get the defaults, MaxStreams none.
type GRPCLimits struct {
	// MaxRecvBytes is the largest request message; a larger one is
	// answered ResourceExhausted naming the limit, unread.
	MaxRecvBytes int
	// MaxStreams caps the calls one connection holds open at once
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more wait for one to end.
	// 0 or less is no cap (grpc-go's default). The REST port's calls all share one
	// loopback connection, so a cap is also the REST calls open at once,
	// watches (:watch, :logs, :watchChanges) included: keep it above them.
	MaxStreams int
	// KeepaliveMinTime is the shortest ping interval a client may use.
	KeepaliveMinTime time.Duration
}

// withDefaults fills l's zero fields.
func (l GRPCLimits) withDefaults() GRPCLimits {
	if l.MaxRecvBytes <= 0 {
		l.MaxRecvBytes = DefaultGRPCMaxRecvBytes
	}
	if l.KeepaliveMinTime <= 0 {
		l.KeepaliveMinTime = DefaultGRPCKeepaliveMinTime
	}
	return l
}

// GRPCServerOptions are the server options that set l (its zero fields at
// their defaults), together with the header list bound
// (GRPCMaxHeaderListBytes). Every limit the gateway's gRPC port has is set
// here, even where it is grpc-go's default, so that each is stated and
// documented (README "Limits", docs/security.md "Hostile input at the gateway's ports").
func GRPCServerOptions(l GRPCLimits) []grpc.ServerOption {
	l = l.withDefaults()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.MaxHeaderListSize(GRPCMaxHeaderListBytes),
		// Without a call open a client may ping once in 2h only (grpc-go):
		// it keeps no idle connection alive through pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: false}),
	}
	if l.MaxStreams > 0 && l.MaxStreams <= math.MaxUint32 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(l.MaxStreams)))
	}
	return opts
}
