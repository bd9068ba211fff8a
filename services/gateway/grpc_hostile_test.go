package gateway

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/ports"
)

// rawCodec sends and receives messages as the bytes given: a client that
// writes what it likes on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// deepValue is a google.protobuf.Value holding lists levels deep in
// protobuf's binary encoding ([[[...]]]: a Value and a ListValue a level),
// built by hand: proto.Marshal would take as long to check it as to write it.
func deepValue(levels int) []byte {
	var b []byte
	for range levels {
		list := protowire.AppendTag(nil, 1, protowire.BytesType) // ListValue.values
		list = protowire.AppendBytes(list, b)
		v := protowire.AppendTag(nil, 6, protowire.BytesType) // Value.list_value
		b = protowire.AppendBytes(v, list)
	}
	return b
}

// TestGRPCRefusesUndecodableRequests: a gRPC request that does not decode
// is the caller's mistake, InvalidArgument saying why, on a unary call and
// on a stream, through the gateway's real gRPC port. A message nested past
// protobuf's recursion limit (a google.protobuf.Value 10,000 lists deep in
// a TrainingPipeline's training_task_inputs) names the limit; garbage bytes
// name the message they were not. grpc-go answers Internal for any codec
// error ("grpc: failed to unmarshal the received message"), which reads as
// the gateway's fault and is retried by clients that retry Internal.
func TestGRPCRefusesUndecodableRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)

	// CreateTrainingPipelineRequest{parent, training_pipeline{display_name,
	// training_task_inputs: deep}}.
	pipeline, err := proto.Marshal(&trainingv1.TrainingPipeline{DisplayName: "deep", TrainingTaskInputs: structpb.NewNullValue()})
	if err != nil {
		t.Fatal(err)
	}
	inputs := (&trainingv1.TrainingPipeline{}).ProtoReflect().Descriptor().Fields().ByName("training_task_inputs").Number()
	pipeline = protowire.AppendTag(pipeline, inputs, protowire.BytesType)
	pipeline = protowire.AppendBytes(pipeline, deepValue(protowire.DefaultRecursionLimit))
	deep, err := proto.Marshal(&trainingv1.CreateTrainingPipelineRequest{Parent: "projects/default/locations/us-central1"})
	if err != nil {
		t.Fatal(err)
	}
	field := (&trainingv1.CreateTrainingPipelineRequest{}).ProtoReflect().Descriptor().Fields().ByName("training_pipeline").Number()
	deep = protowire.AppendTag(deep, field, protowire.BytesType)
	deep = protowire.AppendBytes(deep, pipeline)
	// Sanity: the Go protobuf library refuses it too, for its depth.
	if err := proto.Unmarshal(deep, &trainingv1.CreateTrainingPipelineRequest{}); err == nil || !strings.Contains(err.Error(), "recursion") {
		t.Fatalf("the deep request decodes locally (%v): it tests nothing", err)
	}
	// Just under the limit it decodes: the limit is protobuf's, not ours.
	if err := proto.Unmarshal(deepValue(protowire.DefaultRecursionLimit/2-1), &structpb.Value{}); err != nil {
		t.Fatalf("a Value just under the recursion limit: %v", err)
	}
	garbage := []byte{0xff, 0xff, 0xff, 0xff}
	limit := fmt.Sprintf("nests messages deeper than protobuf's recursion limit of %d levels", protowire.DefaultRecursionLimit)
	for _, c := range []struct {
		name, method string
		stream       bool
		body         []byte
		says         string
	}{
		{"a Value 10,000 lists deep", "/loom.training.v1.TrainingService/CreateTrainingPipeline", false, deep,
			"request: loom.training.v1.CreateTrainingPipelineRequest " + limit},
		{"garbage", "/loom.v1.ClusterService/CreateCluster", false, garbage,
			"request: is not a valid loom.v1.CreateClusterRequest in protobuf's binary encoding"},
		{"garbage on a stream", "/loom.v1.JobService/WatchJob", true, garbage,
			"request: is not a valid loom.v1.WatchJobRequest in protobuf's binary encoding"},
		{"a Value 10,000 lists deep, anonymous", "/loom.training.v1.TrainingService/CreateTrainingPipeline", false, deep, limit},
	} {
		conn := h.conn
		if strings.HasSuffix(c.name, "anonymous") {
			conn = h.anon
		}
		var err error
		if c.stream {
			var s grpc.ClientStream
			s, err = conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, c.method, grpc.ForceCodecV2(rawCodec{}))
			if err == nil {
				if err = s.SendMsg(&c.body); err == nil {
					_ = s.CloseSend()
					var out []byte
					err = s.RecvMsg(&out)
				}
			}
		} else {
			var out []byte
			err = conn.Invoke(ctx, c.method, &c.body, &out, grpc.ForceCodecV2(rawCodec{}))
		}
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), c.says) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", c.name, err, c.says)
		}
	}
	// The port still serves what decodes.
	if _, err := h.clusters().GetCluster(ctx, &loomv1.GetClusterRequest{Name: cluster1}); err != nil {
		t.Errorf("GetCluster after the refusals: %v", err)
	}
}

// http2Settings reads the SETTINGS the gRPC server at addr announces to a
// new connection: id → value.
func http2Settings(t *testing.T, addr string) map[uint16]uint32 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	// The client preface, then an empty SETTINGS frame.
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatalf("write preface: %v", err)
	}
	for {
		var head [9]byte
		if _, err := io.ReadFull(conn, head[:]); err != nil {
			t.Fatalf("read frame: %v", err)
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatalf("read frame: %v", err)
		}
		if head[3] != 4 || head[4]&1 != 0 { // not SETTINGS, or its ACK
			continue
		}
		out := map[uint16]uint32{}
		for i := 0; i+6 <= len(payload); i += 6 {
			out[binary.BigEndian.Uint16(payload[i:])] = binary.BigEndian.Uint32(payload[i+2:])
		}
		return out
	}
}

// HTTP/2 settings ids (RFC 9113 §6.5.2).
const (
	settingMaxConcurrentStreams = 0x3
	settingMaxHeaderListSize    = 0x6
)

// TestGRPCLimits: the gRPC port's limits are in effect, as configured:
// a request message past -grpc-max-recv is ResourceExhausted naming the
// limit; the per-connection call cap (-grpc-max-streams) and the header
// list bound are announced to every connection; without -grpc-max-streams
// no cap is announced (the REST port's loopback connection carries every
// REST call).
func TestGRPCLimits(t *testing.T) {
	t.Parallel()
	const maxRecv, maxStreams = 64 << 10, 7
	h := newHarness(t, func(c *Config) { c.GRPC.MaxRecvBytes, c.GRPC.MaxStreams = maxRecv, maxStreams })
	ctx := testkit.Context(t, wait)
	req := validJob()
	req.Job.Script = "#!/bin/sh\n" + strings.Repeat("#", maxRecv)
	_, err := h.jobs().SubmitJob(ctx, req)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), fmt.Sprint(maxRecv)) {
		t.Errorf("SubmitJob past -grpc-max-recv: %v, want ResourceExhausted naming %d", err, maxRecv)
	}
	got := http2Settings(t, h.grpcAddr)
	if got[settingMaxConcurrentStreams] != maxStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (%v), want %d", got[settingMaxConcurrentStreams], got, maxStreams)
	}
	if got[settingMaxHeaderListSize] != ports.GRPCMaxHeaderListBytes {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d (%v), want %d", got[settingMaxHeaderListSize], got, ports.GRPCMaxHeaderListBytes)
	}
	// The defaults: no stream cap, the same header bound.
	def := newHarness(t)
	got = http2Settings(t, def.grpcAddr)
	if v, ok := got[settingMaxConcurrentStreams]; ok {
		t.Errorf("default SETTINGS_MAX_CONCURRENT_STREAMS = %d, want none announced", v)
	}
	if got[settingMaxHeaderListSize] != ports.GRPCMaxHeaderListBytes {
		t.Errorf("default SETTINGS_MAX_HEADER_LIST_SIZE = %d, want %d", got[settingMaxHeaderListSize], ports.GRPCMaxHeaderListBytes)
	}
}

// TestGRPCLimitsFlags: the -grpc-* flags set the limits, their defaults
// are the documented ones, and a stream cap past HTTP/2's or a negative
// limit stops the start, naming the flag.
func TestGRPCLimitsFlags(t *testing.T) {
	t.Parallel()
	cfg, err := config.ParseArgs("gateway", []string{"-grpc-max-recv", "1024", "-grpc-max-streams", "9",
		"-grpc-keepalive-min-time", "1m"}, (*Config).RegisterFlags)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ports.GRPCLimits{MaxRecvBytes: 1024, MaxStreams: 9, KeepaliveMinTime: time.Minute}); cfg.GRPC != want {
		t.Errorf("limits %+v, want %+v", cfg.GRPC, want)
	}
	def, err := config.ParseArgs("gateway", nil, (*Config).RegisterFlags)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ports.GRPCLimits{MaxRecvBytes: 4 << 20, KeepaliveMinTime: 5 * time.Minute}); def.GRPC != want {
		t.Errorf("default limits %+v, want %+v", def.GRPC, want)
	}
	for _, c := range []struct {
		limits ports.GRPCLimits
		want   string
	}{
		{ports.GRPCLimits{MaxStreams: math.MaxUint32 + 1}, "grpc-max-streams: must be from 0 (no cap) to 4294967295, got 4294967296"},
		{ports.GRPCLimits{MaxStreams: -1}, "grpc-max-streams: must be from 0 (no cap) to 4294967295, got -1"},
		{ports.GRPCLimits{MaxRecvBytes: -1}, "grpc-max-recv: must be a size in bytes, 0 for the default (4194304), got -1"},
		{ports.GRPCLimits{KeepaliveMinTime: -time.Second}, "grpc-keepalive-min-time: must be a duration, 0 for the default (5m0s), got -1s"},
	} {
		if err := Run(context.Background(), Config{GRPC: c.limits}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start with %+v: %v, want %q", c.limits, err, c.want)
		}
	}
}

// TestGRPCUndecodableIsAuditedAndRateLimited: a request that does not
// decode is refused like any other: after authentication, so its audit
// record names the caller's principal (denied, InvalidArgument), on a
// unary call and on a stream, and it counts against the caller's rate
// limit, so a flood of garbage is cut off (ResourceExhausted) as a flood
// of anything else is. Before, the guard answered ahead of the audit,
// authentication and the limiter: garbage was neither recorded nor counted.
func TestGRPCUndecodableIsAuditedAndRateLimited(t *testing.T) {
	t.Parallel()
	const burst = 200
	h := newHarness(t, func(c *Config) { c.Limits.Rate, c.Limits.Burst = 0.001, burst })
	ctx := testkit.Context(t, wait)
	garbage := []byte{0xff, 0xff, 0xff, 0xff}
	const create = "/loom.v1.ClusterService/CreateCluster"
	send := func(who string) error {
		var out []byte
		return h.conn.Invoke(ctx, create, &garbage, &out, grpc.ForceCodecV2(rawCodec{}), h.call(who))
	}
	for i := range burst {
		if err := send("ana"); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("ana's garbage call %d: %v, want InvalidArgument", i, err)
		}
	}
	wantCode(t, "ana's garbage past her burst", send("ana"), codes.ResourceExhausted, "users/ana: more than 0.001 requests a second")
	if err := send("bob"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bob's garbage while ana is limited: %v, want InvalidArgument", err)
	}
	waitAudit(t, ctx, h, "root", "projects/-", record("users/ana", create, "rejected", "InvalidArgument"))

	s, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/loom.v1.JobService/WatchJob", grpc.ForceCodecV2(rawCodec{}), h.call("vic"))
	if err == nil {
		if err = s.SendMsg(&garbage); err == nil {
			_ = s.CloseSend()
			var out []byte
			err = s.RecvMsg(&out)
		}
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("vic's garbage watch: %v, want InvalidArgument", err)
	}
	waitAudit(t, ctx, h, "root", "projects/-", record("users/vic", "/loom.v1.JobService/WatchJob", "rejected", "InvalidArgument"))
}
