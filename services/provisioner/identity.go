package provisioner

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// Values of Config.AgentIdentity.
const (
	AgentIdentityBootstrap = "bootstrap"
	AgentIdentityDirect    = "direct"
)

// DirectIdentityLifetime is how long an identity the provisioner issues
// itself (AgentIdentityDirect) lasts: such an agent cannot renew it, and
// gets a new one with its next launch.
const DirectIdentityLifetime = 30 * 24 * time.Hour

// identityLifetime is the longest an agent's identity lasts in mode
// (Config.AgentIdentity): how long a removed node's revocation is kept.
func identityLifetime(mode string) time.Duration {
	if mode == AgentIdentityDirect {
		return DirectIdentityLifetime
	}
	return auth.DefaultNodeIdentityLifetime
}

// agentIdentityFile is the agent's identity file in its work dir (the
// agent's IdentityFile).
const agentIdentityFile = "identity.json"

// agentCredentials returns what each launch of a local agent gets: a
// one-time bootstrap token for that node of that cluster and pool, in its
// environment (mode "bootstrap"), and in mode "direct" also an identity
// the provisioner signs itself, written 0600 in its work dir. nil when the
// service has no services' key (-insecure-bus): agents then run unsigned.
func agentCredentials(base *service.Base, mode string) func(provider.Node) ([]string, error) {
	if base.ServiceSecret == nil {
		return nil
	}
	iss, err := auth.NewBootstrapIssuer(base.ServiceSecret, nil)
	if err != nil {
		return func(provider.Node) ([]string, error) { return nil, err }
	}
	return func(n provider.Node) ([]string, error) {
		tok, _, err := auth.MintBootstrapToken(iss, n.Name, n.Cluster, n.Pool, 0)
		if err != nil {
			return nil, fmt.Errorf("mint bootstrap token: %w", err)
		}
		path := filepath.Join(n.WorkDir, agentIdentityFile)
		if mode == AgentIdentityDirect {
			// A registration of its own for each launch, as the gateway
			// makes for each bootstrap: the scheduler seals to it once the
			// agent's registration names it.
			now := time.Now()
			id, err := auth.IssueNodeIdentity(base.ServiceKey, n.Name, n.Cluster, n.Pool, auth.NewRegistration(now, ""), now, DirectIdentityLifetime)
			if err != nil {
				return nil, err
			}
			if err := auth.WriteNodeIdentity(path, id); err != nil {
				return nil, fmt.Errorf("write node identity: %w", err)
			}
		}
		return []string{"LOOM_AGENT_BOOTSTRAP_TOKEN=" + tok}, nil
	}
}
