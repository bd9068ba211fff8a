package domain

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Operation verbs.
const (
	VerbCreate = "create"
	VerbDelete = "delete"
)

// NewOperation returns a new, not yet done operation named name that acts
// with verb on target.
func NewOperation(name, verb, target string, now time.Time) *loomv1.Operation {
	return &loomv1.Operation{
		Name: name,
		Metadata: &loomv1.OperationMetadata{
			Target: target, Verb: verb, Progress: "requested", CreateTime: timestamppb.New(now),
		},
	}
}

// OnClusterEvent returns op after a cluster event (ClusterChanged,
// ClusterOperationFailed or ClusterDeleted) that names it, and whether it
// changed. A done operation never changes; op itself is not modified.
func OnClusterEvent(op *loomv1.Operation, payload proto.Message, now time.Time) (*loomv1.Operation, bool) {
	if op.GetDone() {
		return op, false
	}
	next := proto.Clone(op).(*loomv1.Operation)
	if next.Metadata == nil {
		next.Metadata = &loomv1.OperationMetadata{}
	}
	md := next.Metadata
	finish := func() {
		next.Done = true
		md.EndTime = timestamppb.New(now)
	}
	switch ev := payload.(type) {
	case *eventsv1.ClusterChanged:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		md.Progress = Progress(ev.GetCluster())
		if ev.GetOperationDone() {
			finish()
			next.Result = &loomv1.Operation_Cluster{Cluster: ev.GetCluster()}
		}
	case *eventsv1.ClusterOperationFailed:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		finish()
		md.Progress = "failed"
		next.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: ev.GetCode(), Message: ev.GetMessage()}}
	case *eventsv1.ClusterDeleted:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		finish()
		md.Progress = "deleted"
		next.Result = &loomv1.Operation_Cluster{Cluster: &loomv1.Cluster{
			Name: ev.GetCluster(), Status: &loomv1.ClusterStatus{State: loomv1.Cluster_DELETED},
		}}
	default:
		return op, false
	}
	return next, !proto.Equal(op, next)
}

// Progress describes how far a cluster got, for an operation's metadata.
func Progress(c *loomv1.Cluster) string {
	st := c.GetStatus()
	if st.GetMessage() != "" {
		return st.GetMessage()
	}
	switch st.GetState() {
	case loomv1.Cluster_CREATING, loomv1.Cluster_RUNNING:
		return fmt.Sprintf("%d of %d nodes ready", st.GetReadyNodes(), st.GetTotalNodes())
	}
	return strings.ToLower(st.GetState().String())
}
