package guard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// The REST port passes each call on to the gateway's own gRPC port over
// loopback, so without more every REST call would count against, and be
// recorded as coming from, 127.0.0.1: one client's refusals would spend
// every anonymous REST client's rate and audit allowance, and the trail
// would not say who knocked. The REST port therefore tells the gRPC port
// its client's address in metadata that only this process can vouch for:
// RESTClientKey with the address and a secret made at start. A caller of
// the gRPC port cannot know the secret, so what it puts there is ignored.
const (
	// RESTClientKey is the metadata key of the REST client's address.
	RESTClientKey = "x-loom-rest-client"
	// restSecretKey is the metadata key of the process's secret.
	restSecretKey = "x-loom-rest-secret"
	// RESTHeaderPrefix is the HTTP header prefix under which grpc-gateway
	// would pass a REST caller's own metadata with these keys on: the
	// REST port drops such headers (a caller could otherwise add a second
	// value to RESTClientKey).
	RESTHeaderPrefix = "Grpc-Metadata-X-Loom-Rest-"
)

// restSecret vouches for RESTClientKey: random, made once per process.
var restSecret = func() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// RESTClient is the metadata with which the REST port passes on a call
// from the HTTP client at remoteAddr (http.Request.RemoteAddr, "ip:port").
func RESTClient(remoteAddr string) metadata.MD {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	return metadata.Pairs(RESTClientKey, host, restSecretKey, restSecret)
}

// PeerIP is the IP address of the call's client, "" when unknown: for a
// call the REST port passed on (RESTClient's metadata, once each, with
// this process's secret), the REST client's; otherwise the gRPC peer's.
func PeerIP(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	client, secret := md.Get(RESTClientKey), md.Get(restSecretKey)
	if len(client) != 1 || len(secret) != 1 || net.ParseIP(client[0]) == nil ||
		subtle.ConstantTimeCompare([]byte(secret[0]), []byte(restSecret)) != 1 {
		return peerIP(ctx)
	}
	return client[0]
}

// peerIP is the IP address of the call's gRPC peer, "" when unknown.
func peerIP(ctx context.Context) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(pr.Addr.String())
	if err != nil {
		return strings.TrimSpace(pr.Addr.String())
	}
	return host
}
