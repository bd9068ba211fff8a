package app

import (
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// serveOwners serves, on a loopback port until the test ends, the owner
// services register adds (a fake scheduler, provisioner, ...), and returns
// the gateway's clients of them.
func serveOwners(t *testing.T, register func(*grpc.Server)) *adapters.Owners {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	addr := ln.Addr().String()
	owners, err := adapters.DialOwners(addr, addr, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owners.Close() })
	return owners
}
