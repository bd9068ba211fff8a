package app

import (
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// checkSigner refuses a node's step report about a run the scheduler did
// not place on that node: the record is dead-lettered with the reason and
// changes nothing. (The bus already refused a node's report naming
// another node: the payload's node is the signer's.) Reports about runs
// the scheduler does not know pass, and are ignored as before.
//
// It also refuses (no-principal) a CancelJob that names no one it acts as
// (no user, no on_behalf_of) from a signer not in anonymousCancel: the
// domain holds a cancel to the jobs of its principal, but lets one naming
// no principal act on every job (mayAct), so that any sender of the row
// could otherwise cancel anyone's job by leaving the user out.
func (a *App) checkSigner(ev envelope.Event) error {
	if p, ok := ev.Payload.(*eventsv1.CancelJob); ok {
		return CheckCancelPrincipal(ev.Signer, p)
	}
	node, ok := strings.CutPrefix(ev.Signer, "nodes/")
	if !ok {
		return nil
	}
	var job string
	var attempt int32
	switch p := ev.Payload.(type) {
	case *eventsv1.StepChanged:
		job, attempt = p.GetJob(), p.GetAttempt()
	case *eventsv1.TasksChanged:
		job, attempt = p.GetJob(), p.GetAttempt()
	case *eventsv1.StepProgress:
		job, attempt = p.GetJob(), p.GetAttempt()
	case *eventsv1.UsageReported:
		job, attempt = p.GetJob(), p.GetAttempt()
	default:
		return nil
	}
	r := a.state.Run(job, attempt)
	if r == nil {
		return nil
	}
	if _, assigned := r.Steps[node]; !assigned {
		return bus.Permanent(envelope.Reject(envelope.ReasonNotAssigned,
			"%s reports on %s attempt %d, which runs on %d other node(s), not on it", ev.Signer, job, attempt, len(r.Steps)))
	}
	return nil
}

// anonymousCancel are the signers whose CancelJob may name no principal:
// the gateway, which authorized its caller itself before it emitted (a
// caller with no OS account, a service's principal, passes only as an
// administrator of the job's project). Training, the row's other sender,
// names the canceller, or the owner it acts for on its own cancels.
var anonymousCancel = map[string]bool{"services/gateway": true}

// CheckCancelPrincipal refuses (no-principal) a CancelJob with neither
// user nor on_behalf_of signed by a signer not in anonymousCancel. An
// unsigned record (signer "": -insecure-bus, where nothing is verified and
// any user can be forged anyway) passes, as every signer check does there.
// Both backends check every CancelJob with it (slurmbackend too).
func CheckCancelPrincipal(signer string, p *eventsv1.CancelJob) error {
	if p.GetUser() != "" || p.GetOnBehalfOf() != "" || signer == "" || anonymousCancel[signer] {
		return nil
	}
	return bus.Permanent(envelope.Reject(envelope.ReasonNoPrincipal,
		"CancelJob of %s names no user nor on_behalf_of; only the gateway may send one, not %s", p.GetJob(), signer))
}

// AsPrincipal returns the payload the scheduler acts on: a command a user
// made (the gateway stamped their principal on its envelope) acts as that
// user, whatever user the payload names, where the user decides what the
// command may do (cancel or update a job: its owner, or an admin). Both
// backends act on it (slurmbackend too).
func AsPrincipal(ev envelope.Event) proto.Message {
	user, ok := strings.CutPrefix(ev.Principal, "users/")
	if !ok || user == "" {
		return ev.Payload
	}
	switch p := ev.Payload.(type) {
	case *eventsv1.CancelJob:
		if p.GetUser() != user {
			c := proto.Clone(p).(*eventsv1.CancelJob)
			c.User = user
			return c
		}
	case *eventsv1.UpdateJob:
		if p.GetUser() != user {
			c := proto.Clone(p).(*eventsv1.UpdateJob)
			c.User = user
			return c
		}
	}
	return ev.Payload
}
