package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Where an agent's identity comes from (see README.md, Identity).
const (
	// BootstrapTokenEnv holds the one-time bootstrap token the provisioner
	// minted for this launch; the agent reads it and removes it from its
	// environment.
	BootstrapTokenEnv = "LOOM_AGENT_BOOTSTRAP_TOKEN"
	// BootstrapTokenFileEnv names a 0600 file holding it instead.
	BootstrapTokenFileEnv = "LOOM_AGENT_BOOTSTRAP_TOKEN_FILE"
	// IdentityFile is the node identity's file in the work dir (0600): the
	// identity survives a restart of the agent on the same node, and a
	// reimaged node (a new work dir) bootstraps again.
	IdentityFile = "identity.json"
)

// identity is the agent's node identity, renewed in the background: the
// producer's signer follows it.
type identity struct {
	log     *slog.Logger
	node    string
	path    string
	gateway string
	now     func() time.Time
	// onChange is called with each new identity (the producer's signer).
	onChange func(*auth.NodeIdentity) error

	mu  sync.Mutex
	cur *auth.NodeIdentity
	// issued is when cur was issued (renewal starts when a third of its
	// life is left).
	issued time.Time
	conn   *grpc.ClientConn
}

// nodeIdentity loads the node's identity from its work dir, or registers
// with the gateway using the bootstrap token, waiting (with backoff) for
// the gateway until ctx ends.
func nodeIdentity(ctx context.Context, cfg Config, log *slog.Logger) (*identity, error) {
	id := &identity{log: log, node: cfg.Node, path: cfg.IdentityFile, gateway: cfg.Gateway, now: time.Now}
	if id.path == "" {
		id.path = filepath.Join(cfg.WorkDir, IdentityFile)
	}
	token, err := bootstrapToken()
	if err != nil {
		return nil, err
	}
	if cfg.BootstrapToken != "" {
		token = cfg.BootstrapToken
	}
	// An identity kept from before command keys cannot open the commands
	// sealed for the node: with a bootstrap token at hand, register again.
	canRegister := token != "" && cfg.Gateway != ""
	if cur, err := auth.LoadNodeIdentity(id.path); err == nil && cur.Node == cfg.Node && id.now().Before(cur.NotAfter) &&
		(len(cur.CommandKey) > 0 || !canRegister) {
		id.cur, id.issued = cur, id.now()
		log.Info("node identity loaded", "file", id.path, "expires", cur.NotAfter)
		return id, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("node identity unusable; bootstrapping again", "file", id.path, "err", err)
	}
	if !canRegister {
		return nil, fmt.Errorf("agent %s has no node identity (%s) and cannot bootstrap one: it needs a bootstrap token (%s or %s, minted by the provisioner) and the gateway (-gateway, LOOM_GATEWAY)",
			cfg.Node, id.path, BootstrapTokenEnv, BootstrapTokenFileEnv)
	}
	delay := 100 * time.Millisecond
	for {
		err := id.register(ctx, token)
		if err == nil {
			return id, nil
		}
		if errors.Is(err, errPermanent) || ctx.Err() != nil {
			return nil, err
		}
		log.Warn("node registration failed; retrying", "gateway", cfg.Gateway, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent %s: register with the gateway: %w (last: %v)", cfg.Node, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// bootstrapToken reads the launch's bootstrap token and removes it from the
// environment, so that nothing the agent starts inherits it.
func bootstrapToken() (string, error) {
	tok := os.Getenv(BootstrapTokenEnv)
	os.Unsetenv(BootstrapTokenEnv)
	if path := os.Getenv(BootstrapTokenFileEnv); tok == "" && path != "" {
		os.Unsetenv(BootstrapTokenFileEnv)
		st, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("bootstrap token file: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("bootstrap token file %s has mode %v: it must not be readable by group or others", path, st.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		tok = strings.TrimSpace(string(b))
	}
	return tok, nil
}

var errPermanent = errors.New("permanent")

// client returns the gateway's AuthService client.
func (id *identity) client() (loomv1.AuthServiceClient, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.conn == nil {
		conn, err := grpc.NewClient(id.gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		id.conn = conn
	}
	return loomv1.NewAuthServiceClient(id.conn), nil
}

// register exchanges the bootstrap token for an identity.
func (id *identity) register(ctx context.Context, token string) error {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return err
	}
	c, err := id.client()
	if err != nil {
		return fmt.Errorf("%w: gateway %s: %v", errPermanent, id.gateway, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.RegisterNode(cctx, &loomv1.RegisterNodeRequest{BootstrapToken: token, Node: id.node, PublicKey: pub})
	if err != nil {
		if permanentCode(err) {
			return fmt.Errorf("%w: register node %s: %v", errPermanent, id.node, err)
		}
		return err
	}
	return id.adopt(resp, priv, nil)
}

// adopt makes a gateway's answer the identity and keeps it on disk;
// renewed is the identity a renewal renewed (nil for a registration).
func (id *identity) adopt(resp *loomv1.NodeIdentity, priv ed25519.PrivateKey, renewed *auth.NodeIdentity) error {
	if resp.GetNode() != "" && resp.GetNode() != id.node {
		return fmt.Errorf("%w: the gateway issued an identity for %s, not %s", errPermanent, resp.GetNode(), id.node)
	}
	cur := &auth.NodeIdentity{Node: id.node, Cluster: resp.GetCluster(), Pool: resp.GetPool(), Key: priv, Cert: resp.GetCertificate(),
		ServicePublicKey: resp.GetServicePublicKey(), CommandKey: resp.GetCommandKey(), AccessToken: resp.GetAccessToken(),
		NotAfter: resp.GetExpireTime().AsTime(), Registration: auth.CertRegistration(resp.GetCertificate())}
	if renewed != nil && cur.Registration == "" && auth.SealingRegistration(renewed.Registration) != "" {
		// Renewed by a gateway of the release before registrations were
		// certified (a rolling upgrade): a renewal keeps the registration
		// (one whose node registered again is refused), but such a
		// gateway names none and hands the key of none. The scheduler
		// seals for the registration, whose key this agent keeps.
		cur.Registration, cur.CommandKey = renewed.Registration, renewed.CommandKey
	}
	if len(cur.ServicePublicKey) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the gateway's identity has no service public key", errPermanent)
	}
	if _, err := auth.VerifyNodeCert(cur.ServicePublicKey, cur.Cert, id.now()); err != nil {
		return fmt.Errorf("%w: the gateway's certificate: %v", errPermanent, err)
	}
	if err := auth.WriteNodeIdentity(id.path, cur); err != nil {
		return fmt.Errorf("keep node identity: %w", err)
	}
	id.mu.Lock()
	id.cur, id.issued = cur, id.now()
	onChange := id.onChange
	id.mu.Unlock()
	if onChange != nil {
		return onChange(cur)
	}
	return nil
}

// current returns the identity now.
func (id *identity) current() *auth.NodeIdentity {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.cur
}

// signer is the identity's event signer.
func signerOf(cur *auth.NodeIdentity) (*envelope.Signer, error) {
	return envelope.NewNodeSigner(cur.Key, cur.Cert)
}

// renewAt is when the identity is renewed: when a third of its life is left.
func (id *identity) renewAt() time.Time {
	id.mu.Lock()
	defer id.mu.Unlock()
	life := id.cur.NotAfter.Sub(id.issued)
	return id.cur.NotAfter.Add(-life / 3)
}

// renewLoop renews the identity when a third of its life is left, until ctx
// ends; failures are retried with backoff. An identity without an access
// token (issued by the provisioner, not the gateway) is not renewed here:
// the provisioner issues a new one with the next launch. The agent's work
// goes on throughout: only the producer's signer changes.
func (id *identity) renewLoop(ctx context.Context) error {
	if id.current().AccessToken == "" || id.gateway == "" {
		return nil
	}
	delay := time.Second
	for {
		wait := time.Until(id.renewAt())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(wait, 0)):
		}
		if err := id.renew(ctx); err != nil {
			id.log.Warn("node identity renewal failed; retrying", "expires", id.current().NotAfter, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
			continue
		}
		delay = time.Second
		id.log.Info("node identity renewed", "expires", id.current().NotAfter)
	}
}

// renew asks the gateway for a fresh identity for a fresh key.
func (id *identity) renew(ctx context.Context) error {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return err
	}
	c, err := id.client()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.RenewNodeIdentity(cctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub}, grpc.PerRPCCredentials(auth.Bearer(id.current().AccessToken)))
	if err != nil {
		return err
	}
	return id.adopt(resp, priv, id.current())
}

// workloadToken asks the gateway for a token scoped to job (a job attempt
// this node runs), for the job's processes (LOOM_TOKEN).
func (id *identity) workloadToken(ctx context.Context, job string) (string, error) {
	cur := id.current()
	if cur.AccessToken == "" || id.gateway == "" {
		return "", errors.New("the node identity has no access token to ask the gateway for a workload token with")
	}
	c, err := id.client()
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t, err := c.CreateToken(cctx, &loomv1.CreateTokenRequest{Job: job}, grpc.PerRPCCredentials(auth.Bearer(cur.AccessToken)))
	if err != nil {
		return "", err
	}
	return t.GetAccessToken(), nil
}

// close closes the gateway connection.
func (id *identity) close() {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.conn != nil {
		_ = id.conn.Close()
		id.conn = nil
	}
}

// permanentCode reports gateway answers that retrying the same request
// cannot change: a used, expired or foreign bootstrap token.
func permanentCode(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
		return true
	}
	return false
}

// sign makes p sign with the identity, now and after each renewal.
func (id *identity) sign(p interface{ SetSigner(*envelope.Signer) }) error {
	s, err := signerOf(id.current())
	if err != nil {
		return err
	}
	p.SetSigner(s)
	id.mu.Lock()
	id.onChange = func(cur *auth.NodeIdentity) error {
		s, err := signerOf(cur)
		if err != nil {
			return err
		}
		p.SetSigner(s)
		return nil
	}
	id.mu.Unlock()
	return nil
}

// tokens is the app's source of workload tokens: nil without an identity
// the gateway issued (no access token to ask with).
func (id *identity) tokens() func(context.Context, string) (string, error) {
	if id == nil || id.current().AccessToken == "" || id.gateway == "" {
		return nil
	}
	return id.workloadToken
}
