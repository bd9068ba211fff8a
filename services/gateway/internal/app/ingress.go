package app

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/trainingspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Ingress (IngressService): what came in through Pub/Sub and Kafka, per
// producer and per message. The bridge owns the records; these reads go to
// its internal gRPC, as HealthService's go to health. The authorization
// table has checked the caller (a viewer of the project; "projects/-" a
// cluster administrator) before they run.

// bridge is the bridge's IngressService client, or an Unavailable error
// when the gateway was started without one.
func (g *Gateway) bridge() (loomv1.IngressServiceClient, error) {
	if g.own.Ingress == nil {
		return nil, fmt.Errorf("the gateway has no bridge to ask (-bridge-addr): %w", errs.Unavailable)
	}
	return g.own.Ingress, nil
}

// fromBridge names the bridge in an error it answered with, keeping its
// code, as fromHealth does for health.
func fromBridge(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		return status.Errorf(st.Code(), "%s: the bridge did not answer (%s); check that it runs and that the gateway's -bridge-addr points at it", what, st.Message())
	}
	return err
}

// checkIngressList checks what the gateway can of an ingress list request
// before it goes to the bridge: the parent ("projects/{p}" or
// "projects/-"), page_size (paging.CheckSize), page_token and filter within their
// bounds. The bridge checks the token and the filter's grammar.
func checkIngressList(v *errs.Validator, parent string, size int32, token string) {
	if parent != "projects/-" {
		if _, err := resname.ParseProject(parent); err != nil {
			v.Add("parent", "%v (or projects/- for every project)", err)
		}
	}
	paging.CheckSize(v, size)
	v.Check(len(token) <= paging.MaxTokenLen, "page_token", "is %d bytes, at most %d; send the next_page_token of the previous page unchanged", len(token), paging.MaxTokenLen)
}

// ListIngressProducers lists a project's producers (or every project's)
// with their counts, from the bridge.
func (g *Gateway) ListIngressProducers(ctx context.Context, req *loomv1.ListIngressProducersRequest) (*loomv1.ListIngressProducersResponse, error) {
	var v errs.Validator
	checkIngressList(&v, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	if err := v.Err(); err != nil {
		return nil, err
	}
	b, err := g.bridge()
	if err != nil {
		return nil, err
	}
	resp, err := b.ListIngressProducers(ctx, req)
	if err != nil {
		return nil, fromBridge("list the ingress producers of "+req.GetParent(), err)
	}
	return resp, nil
}

// ListIngressMessages lists a project's recent ingress messages (or every
// project's), newest first, from the bridge; the filter is passed on.
func (g *Gateway) ListIngressMessages(ctx context.Context, req *loomv1.ListIngressMessagesRequest) (*loomv1.ListIngressMessagesResponse, error) {
	var v errs.Validator
	checkIngressList(&v, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	v.Check(len(req.GetFilter()) <= trainingspec.MaxFilterLen, "filter", "%d bytes, more than the limit of %d", len(req.GetFilter()), trainingspec.MaxFilterLen)
	if err := v.Err(); err != nil {
		return nil, err
	}
	b, err := g.bridge()
	if err != nil {
		return nil, err
	}
	resp, err := b.ListIngressMessages(ctx, req)
	if err != nil {
		return nil, fromBridge("list the ingress messages of "+req.GetParent(), err)
	}
	return resp, nil
}
