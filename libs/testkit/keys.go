package testkit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// serviceSecret is the test binary's services' secret: every service a
// test starts signs with it and trusts it, and Publish signs with it.
var serviceSecret = sync.OnceValue(func() []byte {
	b := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
})

// ServiceSecret returns the test binary's services' secret (the content of
// ServiceKeyFile's files).
func ServiceSecret() []byte { return append([]byte(nil), serviceSecret()...) }

// ServiceKey returns the test binary's services' Ed25519 key.
func ServiceKey() ed25519.PrivateKey {
	k, err := auth.ServiceKey(serviceSecret())
	if err != nil {
		panic(err)
	}
	return k
}

// ServiceKeyFile writes the test binary's services' secret to a 0600 file
// in a directory removed with the test, and returns its path: what a test
// gives a service as config.Common.ServiceKeyFile.
func ServiceKeyFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "service.key")
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(serviceSecret())+"\n"), 0o600); err != nil {
		t.Fatalf("testkit: service key file: %v", err)
	}
	return path
}

// testSigner signs what Publish writes, as the service "test".
var testSigner = sync.OnceValue(func() *envelope.Signer { return envelope.NewServiceSigner("test", ServiceKey()) })

// Sign signs m as the test's service ("services/test") would.
func Sign(m *kafka.Message) { testSigner().Sign(m) }

// Signer returns the signer Publish uses ("services/test"): a test gives
// it to a bus.Producer of its own (SetSigner) to write as a service would.
func Signer() *envelope.Signer { return testSigner() }

// signersAs caches SignerAs' signers by service.
var signersAs sync.Map

// SignerAs returns a signer of the test's services' key that signs as
// "services/<service>": how a test writes what only some services may
// send (envelope.Senders: the scheduler's step commands, health's node
// commands and verdicts, the provisioner's nodes and answers to a repair,
// the gateway's commands).
func SignerAs(service string) *envelope.Signer {
	if s, ok := signersAs.Load(service); ok {
		return s.(*envelope.Signer)
	}
	s, _ := signersAs.LoadOrStore(service, envelope.NewServiceSigner(service, ServiceKey()))
	return s.(*envelope.Signer)
}

// ServiceCredentials is the dial option that makes a connection's calls
// carry a service token ("services/test") of the test's services' secret:
// what the internal APIs (provisioner, scheduler, registry) require.
func ServiceCredentials() grpc.DialOption {
	iss, err := auth.NewServiceTokenIssuer(serviceSecret(), nil)
	if err != nil {
		panic(err)
	}
	return grpc.WithPerRPCCredentials(auth.ServiceTokenSource(iss, "test"))
}

// NodeProducer returns a producer that signs as the agent of node (in
// cluster's pool), with an hour-long identity the test's services' key
// certified, as a registered agent's: what a test publishes with it is a
// node's event, genuine or, for another node's payload, forged. It is
// closed when the test ends.
func NodeProducer(t testing.TB, broker, node, cluster, pool string) *bus.Producer {
	t.Helper()
	p := bus.NewProducer([]string{broker})
	p.SetSigner(nodeSigner(t, node, cluster, pool))
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// nodeSigner returns a signer of the agent of node (a node of cluster, in
// pool), with an hour-long identity the test's services' key certified, as
// a registered agent's.
func nodeSigner(t testing.TB, node, cluster, pool string) *envelope.Signer {
	t.Helper()
	id, err := auth.IssueNodeIdentity(ServiceKey(), node, cluster, pool, "", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := envelope.NewNodeSigner(id.Key, id.Cert)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// PublishAsNodes is Publish with each event signed by the agent of the
// node its payload names (a node of cluster; a HealthCheckCompleted names
// it in its result): how a test writes a node's report (a type whose row
// in envelope.Senders names envelope.Nodes), which no service may send. An
// event must be keyed as the agent keys it (envelope.NodeRecordKey), or
// its consumer refuses it. It fails the test for a payload that names no
// node.
func PublishAsNodes(t testing.TB, broker, cluster string, events ...envelope.Event) {
	t.Helper()
	signers := map[string]*envelope.Signer{}
	publishSigned(t, broker, func(e envelope.Event) *envelope.Signer {
		node := ""
		switch p := e.Payload.(type) {
		case interface{ GetNode() string }:
			node = p.GetNode()
		case checkResult:
			node = p.GetResult().GetNode()
		}
		if node == "" {
			t.Fatalf("testkit: publish as a node: %s names no node", envelope.TypeOf(e.Payload))
		}
		s, ok := signers[node]
		if !ok {
			s = nodeSigner(t, node, cluster, "gpu")
			signers[node] = s
		}
		return s
	}, events)
}

// checkResult is a payload that names its node in its result
// (HealthCheckCompleted).
type checkResult interface {
	GetResult() *loomv1.HealthCheckResult
}
