package ports

import (
	"context"
	"fmt"
	"net"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// RESTMux returns the REST/JSON API: grpc-gateway handlers that call the
// gateway's own gRPC endpoint at grpcAddr, so both APIs share one code path
// (validation, error mapping). JSON uses the proto field names; server streams
// come out as newline-delimited JSON objects {"result": ...}. The returned
// function closes the connection to grpcAddr.
func RESTMux(ctx context.Context, grpcAddr string) (*runtime.ServeMux, func() error, error) {
	conn, err := grpc.NewClient(dialable(grpcAddr),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		return nil, nil, fmt.Errorf("rest: dial own gRPC at %s: %w", grpcAddr, err)
	}
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}))
	for _, reg := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		loomv1.RegisterClusterServiceHandler,
		loomv1.RegisterReservationServiceHandler,
		loomv1.RegisterJobServiceHandler,
		loomv1.RegisterSlurmServiceHandler,
		loomv1.RegisterOperationServiceHandler,
		loomv1.RegisterNodeServiceHandler,
		loomv1.RegisterModelServiceHandler,
	} {
		if err := reg(ctx, mux, conn); err != nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("rest: register handlers: %w", err)
		}
	}
	return mux, conn.Close, nil
}

// dialable turns a listen address with an unspecified host (":7070",
// "0.0.0.0:7070") into one to dial on loopback.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
