package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Operation verbs.
const (
	VerbCreate = "create"
	VerbDelete = "delete"
	VerbUpdate = "update"
	// VerbExport is ExportModel's: its target is the model version.
	VerbExport = "export"
	// VerbUpload is UploadModel's: its target is the parent
	// ("projects/{p}/locations/{l}").
	VerbUpload = "upload"
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

// OnClusterEvent returns op after an event of loom.cluster.events.v1 that
// names it, and whether it changed: ClusterChanged advances it (progress) and
// finishes it on operation_done (result: the cluster); ReservationChanged
// likewise (result: the reservation); ClusterDeleted and ReservationDeleted
// finish it; ClusterOperationFailed finishes it with the error. A done operation never changes; op itself is not modified.
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
	case *eventsv1.ReservationChanged:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		if ev.GetOperationDone() {
			finish()
			md.Progress = "done"
			next.Result = &loomv1.Operation_Reservation{Reservation: ev.GetReservation()}
		}
	case *eventsv1.ReservationDeleted:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		finish()
		md.Progress = "deleted"
		next.Result = &loomv1.Operation_Reservation{Reservation: &loomv1.Reservation{Name: ev.GetReservation()}}
	default:
		return op, false
	}
	return next, !proto.Equal(op, next)
}

// OnModelEvent returns op after an event of loom.model.events.v1 that
// names it, and whether it changed: ModelExported finishes it with the
// ExportModelResponse, ModelExportFailed with the error (its code and
// reason); ModelVersionRegistered whose request_id is op's name finishes it
// with the UploadModelResponse, ModelUploadFailed with its code and reason.
// A done operation never changes; op itself is not modified.
func OnModelEvent(op *loomv1.Operation, payload proto.Message, now time.Time) (*loomv1.Operation, bool) {
	if op.GetDone() {
		return op, false
	}
	next := proto.Clone(op).(*loomv1.Operation)
	if next.Metadata == nil {
		next.Metadata = &loomv1.OperationMetadata{}
	}
	switch ev := payload.(type) {
	case *eventsv1.ModelExported:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		r := ev.GetResponse()
		next.Metadata.Progress = fmt.Sprintf("done: %d copied, %d already there, %d bytes", r.GetCopied(), r.GetSkipped(), r.GetBytes())
		next.Result = &loomv1.Operation_ExportModel{ExportModel: r}
	case *eventsv1.ModelExportFailed:
		if ev.GetOperation() != op.GetName() {
			return op, false
		}
		next.Metadata.Progress = "failed"
		next.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: ev.GetCode(), Message: ev.GetMessage()}}
	case *eventsv1.ModelVersionRegistered:
		if ev.GetRequestId() != op.GetName() {
			return op, false
		}
		mv, err := resname.SplitModelVersion(ev.GetVersion().GetName())
		if err != nil {
			next.Metadata.Progress = "failed"
			next.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: int32(codes.Internal),
				Message: fmt.Sprintf("the registry answered version %q, not a version name; list the model's versions (loom models versions)", ev.GetVersion().GetName())}}
			break
		}
		location := "global"
		if _, loc, ok := strings.Cut(op.GetMetadata().GetTarget(), "/locations/"); ok {
			location = loc
		}
		r := &loomv1.UploadModelResponse{
			Model:          "projects/" + mv.Model.Project + "/locations/" + location + "/models/" + mv.Model.ID,
			ModelVersionId: strconv.FormatInt(mv.Version, 10),
		}
		next.Metadata.Progress = fmt.Sprintf("done: %s@%s", r.GetModel(), r.GetModelVersionId())
		next.Result = &loomv1.Operation_UploadModel{UploadModel: r}
	case *eventsv1.ModelUploadFailed:
		if ev.GetRequestId() != op.GetName() {
			return op, false
		}
		code := ev.GetCode()
		if code == 0 { // a registry older than the field: every refusal was InvalidArgument
			code = int32(codes.InvalidArgument)
		}
		next.Metadata.Progress = "failed"
		next.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: code, Message: ev.GetReason()}}
	default:
		return op, false
	}
	next.Done = true
	next.Metadata.EndTime = timestamppb.New(now)
	return next, true
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

// Unchanged returns op finished at once for an update that changes nothing:
// done, result the cluster as it is.
func Unchanged(op *loomv1.Operation, current *loomv1.Cluster, now time.Time) *loomv1.Operation {
	next := proto.Clone(op).(*loomv1.Operation)
	next.Done = true
	next.Metadata.Progress = "no change"
	next.Metadata.EndTime = timestamppb.New(now)
	next.Result = &loomv1.Operation_Cluster{Cluster: current}
	return next
}
