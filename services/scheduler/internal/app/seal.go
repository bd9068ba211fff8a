package app

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// SealCommands makes the app seal the confidential fields of the StartStep
// and LaunchTasks it writes (script, command, environment) for the node
// each is for, with the command key of the node's registration the command
// names (the domain sets it from the provisioner's NodeChanged), derived
// from serviceSecret (auth.CommandKey): every agent can read the step commands' topic, and only
// the node a command is for may read its job's secrets. Sealing happens here,
// where emits become outbox records: the domain, its state and its decisions
// keep the commands in the clear. nil (no services' key: an insecure
// development bus) leaves them unsealed. Call it before Start or Lead.
func (a *App) SealCommands(serviceSecret []byte) {
	a.commandSecret = append([]byte(nil), serviceSecret...)
	if serviceSecret == nil {
		a.commandSecret = nil
	}
}

// seal returns p as it goes on the bus: a step command sealed for its node
// when SealCommands set a secret, anything else as is.
func (a *App) seal(p proto.Message) (proto.Message, error) {
	if a.commandSecret == nil || !envelope.IsSealable(p) {
		return p, nil
	}
	var node, reg string
	switch c := p.(type) {
	case *eventsv1.StartStep:
		node, reg = c.GetNode(), c.GetRegistration()
	case *eventsv1.LaunchTasks:
		node, reg = c.GetNode(), c.GetRegistration()
	}
	s, err := envelope.SealCommand(auth.CommandKey(a.commandSecret, node, reg), p)
	if err != nil {
		return nil, fmt.Errorf("seal %s for %s (registration %q): %w", proto.MessageName(p), node, reg, err)
	}
	return s, nil
}
