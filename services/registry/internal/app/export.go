package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/blobstore"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ExportAttempts is how many times an ExportModel command is tried (the
// export group's bus MaxAttempts): the last attempt that cannot finish
// answers the operation failed rather than leaving it unanswered.
const ExportAttempts = 5

// HandleExport runs an ExportModel command of loom.model.commands.v1 (the
// gateway's ExportModel operation; other events are ignored). It is the
// handler of its own consumer group, beside Handle: a copy takes long.
func (r *Registry) HandleExport(ctx context.Context, ev envelope.Event) error {
	cmd, ok := ev.Payload.(*eventsv1.ExportModel)
	if !ok {
		return nil
	}
	r.amu.Lock()
	if r.attempts == nil {
		r.attempts = map[string]int{}
	}
	r.attempts[ev.ID]++
	attempt := r.attempts[ev.ID]
	r.amu.Unlock()
	err := r.handleExport(ctx, ev, cmd, attempt >= ExportAttempts)
	if err == nil || attempt >= ExportAttempts {
		r.amu.Lock()
		delete(r.attempts, ev.ID)
		r.amu.Unlock()
	}
	return err
}

// handleExport runs an ExportModel command and answers it, with the
// command's inbox mark, in one Apply: ModelExported when the copy is whole,
// ModelExportFailed with the status code and reason when it cannot succeed
// as sent. An error that may pass (the copy cut short by ctx or by the
// handler's timeout, Redis, a store that is Unavailable) is returned, so
// that the command is delivered again: the copy then resumes, skipping the
// objects already there, and the operation is answered once. A registry
// killed mid-copy resumes the same way from the uncommitted command. On the
// last attempt (last) such an error fails the operation instead, saying to
// export again (it resumes), so that no operation stays unanswered.
func (r *Registry) handleExport(ctx context.Context, ev envelope.Event, cmd *eventsv1.ExportModel, last bool) error {
	// wctx bounds the registry's own reads and writes: on the last attempt
	// it outlives ctx (which may be spent), so that the answer is written.
	wctx := ctx
	if last {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
	}
	r.wmu.Lock()
	err := r.drv.Ready(wctx)
	r.wmu.Unlock()
	if err != nil {
		return err
	}
	// The copy is the costly part: a redelivery of an answered command skips it.
	if seen, err := r.repo.Store().Seen(wctx, ev.ID); err != nil || seen {
		return err
	}
	req := &loomv1.ExportModelRequest{Name: cmd.GetName(), OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: cmd.GetDestination()}}}
	resp, version, err := r.export(ctx, req, writer{osUser: cmd.GetOsUser(), anyOwner: cmd.GetAnyOwner()})
	var answer proto.Message
	switch {
	case err == nil:
		answer = &eventsv1.ModelExported{Operation: cmd.GetOperation(), Response: resp, Version: version}
	case retryable(ctx, err) && !last:
		return fmt.Errorf("export %s (operation %s), to be resumed: %w", cmd.GetName(), cmd.GetOperation(), err)
	case retryable(ctx, err):
		answer = &eventsv1.ModelExportFailed{Operation: cmd.GetOperation(), Code: int32(codes.DeadlineExceeded),
			Message: fmt.Sprintf("the export did not finish in %d attempts (%v); export again: it resumes, skipping what was copied (or raise the registry's -export-timeout)", ExportAttempts, err)}
	default:
		answer = &eventsv1.ModelExportFailed{Operation: cmd.GetOperation(), Code: int32(exportCode(err)), Message: err.Error()}
	}
	tx, err := r.repo.AnswerExportTx(cmd.GetName(), answer)
	if err != nil {
		return err
	}
	// The driver is shared with Handle and the RPCs: writes go under wmu.
	r.wmu.Lock()
	applied, err := r.drv.Apply(wctx, ev.ID, tx, nil)
	r.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("answer export %s: %w", cmd.GetOperation(), err)
	}
	if applied {
		if f, ok := answer.(*eventsv1.ModelExportFailed); ok {
			r.log.Info("model export refused", "operation", cmd.GetOperation(), "name", cmd.GetName(), "user", cmd.GetUser(), "reason", f.GetMessage())
		} else {
			r.log.Info("model export done", "operation", cmd.GetOperation(), "version", version, "user", cmd.GetUser())
		}
	}
	return nil
}

// retryable reports whether an export's error may pass by itself: ctx ended
// (a shutdown, the handler's timeout), or the store or Redis Unavailable.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return errs.Code(err) == codes.Unavailable
}

// exportCode is the status code a failed export's operation carries
// (Unknown for an error no code was given to).
func exportCode(err error) codes.Code {
	if errors.Is(err, blobstore.ErrUnimplemented) {
		return codes.Unimplemented
	}
	return errs.Code(err)
}
