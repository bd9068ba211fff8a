package scan

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// EncodeScan is a scan's stored form (JSON).
func EncodeScan(sc *Scan) ([]byte, error) {
	b, err := json.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("encode scan %s: %w", sc.Key, err)
	}
	return b, nil
}

// DecodeScan reads a stored scan.
func DecodeScan(b []byte) (*Scan, error) {
	sc := &Scan{}
	if err := json.Unmarshal(b, sc); err != nil {
		return nil, fmt.Errorf("decode scan: %w", err)
	}
	if sc.Runs == nil {
		sc.Runs = map[string]*Run{}
	}
	if sc.Rings == nil {
		sc.Rings = map[string]*Ring{}
	}
	return sc, nil
}

// EncodeNode is a node's stored form (JSON).
func EncodeNode(n *Node) ([]byte, error) { return json.Marshal(n) }

// DecodeNode reads a stored node.
func DecodeNode(b []byte) (*Node, error) {
	n := &Node{}
	if err := json.Unmarshal(b, n); err != nil {
		return nil, fmt.Errorf("decode node: %w", err)
	}
	return n, nil
}

// EncodeResult is a result's stored form (protobuf).
func EncodeResult(r *loomv1.HealthCheckResult) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(r)
}

// DecodeResult reads a stored result.
func DecodeResult(b []byte) (*loomv1.HealthCheckResult, error) {
	r := &loomv1.HealthCheckResult{}
	if err := proto.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	return r, nil
}
