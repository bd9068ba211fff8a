package checks

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/loom-ml/loom/libs/auth"
)

// Peer authentication of the all-reduce endpoint. A connection is the left
// neighbour's half of a ring; whoever can open one can feed a check wrong
// data or hold the endpoint's slots, so on an agent with a node identity
// only another node of the same cluster may. Serve opens every connection
// with a challenge (challengeMagic and a fresh 32-byte nonce); the dialer
// answers with its hello (ring, rank, ranks), its node certificate (signed
// by the services' key, as the agent got it with its identity) and its node
// key's Ed25519 signature over peerAuthContext, the nonce and the hello.
// Serve checks the certificate with the services' public key (expiry
// included), that it is for this node's cluster, and the signature: a
// replayed answer fails on the nonce, a stolen certificate without its key
// fails on the signature. A connection that does not pass is closed and
// counted (loom_agent_check_peers_refused_total). An agent without an
// identity (an insecure development bus) sends no certificate and checks
// none, as nothing else on such a bus is authenticated either.

// challengeMagic starts the endpoint's challenge.
const challengeMagic = "LOOMARC1"

// nonceSize is the challenge's nonce.
const nonceSize = 32

// peerAuthContext binds a signature to this protocol, so that a node's
// signature made for anything else is never an answer here.
const peerAuthContext = "loom allreduce peer v1\x00"

// handshakeTimeout bounds the challenge and the hello, so that a peer that
// connects and stays silent does not hold a slot for long.
const handshakeTimeout = 10 * time.Second

// Reasons a connection is refused: the label of the refused counter.
const (
	refusedBusy          = "busy"
	refusedMalformed     = "malformed"
	refusedUnauthentic   = "unauthenticated"
	refusedOtherCluster  = "other_cluster"
	refusedNoCertificate = "no_certificate"
)

// newRefusedCounter is loom_agent_check_peers_refused_total.
func newRefusedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loom_agent_check_peers_refused_total",
		Help: "Connections to the agent's all-reduce check endpoint it refused, by reason (busy, malformed, no_certificate, unauthenticated, other_cluster).",
	}, []string{"reason"})
}

// Collector is the endpoint's refused-connections counter, for the agent's
// /metrics.
func (r *Runner) Collector() prometheus.Collector { return r.refused }

// Refused is how many connections the endpoint refused for reason (one of
// busy, malformed, no_certificate, unauthenticated, other_cluster).
func (r *Runner) Refused(reason string) float64 {
	var m dto.Metric
	_ = r.refused.WithLabelValues(reason).Write(&m)
	return m.GetCounter().GetValue()
}

// identity is the node's current identity, nil without one.
func (r *Runner) identity() *auth.NodeIdentity {
	if r.cfg.Identity == nil {
		return nil
	}
	return r.cfg.Identity()
}

// refusal is why a connection was refused.
type refusal struct {
	reason string
	err    error
}

func (e *refusal) Error() string { return e.err.Error() }

func refuse(reason string, format string, args ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

// challenge writes the endpoint's challenge to c and returns its nonce.
func challenge(c net.Conn) ([]byte, error) {
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	_, err := c.Write(append([]byte(challengeMagic), nonce...))
	return nonce, err
}

// readChallenge reads the endpoint's challenge and returns its nonce.
func readChallenge(r io.Reader) ([]byte, error) {
	b := make([]byte, len(challengeMagic)+nonceSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("challenge: %w", err)
	}
	if string(b[:len(challengeMagic)]) != challengeMagic {
		return nil, errors.New("challenge: not an all-reduce check endpoint")
	}
	return b[len(challengeMagic):], nil
}

// hello is what the dialer sends: magic, ring id, its rank and the ring's
// size.
func hello(ring string, from, n int) []byte {
	b := make([]byte, 0, len(helloMagic)+2+len(ring)+8)
	b = append(b, helloMagic...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(ring)))
	b = append(b, ring...)
	b = binary.BigEndian.AppendUint32(b, uint32(from))
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

func signed(nonce, hello []byte) []byte {
	return append(append([]byte(peerAuthContext), nonce...), hello...)
}

// writeHello answers the challenge nonce: the hello, then id's certificate
// (a uint16 length, then the bytes) and its signature; with no identity, a
// zero length and no signature.
func writeHello(w io.Writer, nonce []byte, id *auth.NodeIdentity, ring string, from, n int) error {
	h := hello(ring, from, n)
	b := append([]byte(nil), h...)
	if id == nil || len(id.Key) != ed25519.PrivateKeySize {
		b = binary.BigEndian.AppendUint16(b, 0)
	} else {
		b = binary.BigEndian.AppendUint16(b, uint16(len(id.Cert)))
		b = append(b, id.Cert...)
		b = append(b, ed25519.Sign(id.Key, signed(nonce, h))...)
	}
	_, err := w.Write(b)
	return err
}

// readHello reads a hello answering nonce and, when id is set, checks its
// certificate and signature against id's services' key and cluster at now.
// Every length is bounded: the ring id by maxRingID, the certificate by
// auth.MaxCertBytes.
func readHello(r *bufio.Reader, nonce []byte, id *auth.NodeIdentity, now time.Time) (ring string, from, n int, err error) {
	var h bytes.Buffer
	head := make([]byte, len(helloMagic)+2)
	if _, err := io.ReadFull(r, head); err != nil {
		return "", 0, 0, refuse(refusedMalformed, "hello: %w", err)
	}
	if string(head[:len(helloMagic)]) != helloMagic {
		return "", 0, 0, refuse(refusedMalformed, "hello: not an all-reduce peer")
	}
	l := int(binary.BigEndian.Uint16(head[len(helloMagic):]))
	if l == 0 || l > maxRingID {
		return "", 0, 0, refuse(refusedMalformed, "hello: ring id of %d bytes", l)
	}
	rest := make([]byte, l+8+2)
	if _, err := io.ReadFull(r, rest); err != nil {
		return "", 0, 0, refuse(refusedMalformed, "hello: %w", err)
	}
	h.Write(head)
	h.Write(rest[:l+8])
	ring, from, n = string(rest[:l]), int(binary.BigEndian.Uint32(rest[l:])), int(binary.BigEndian.Uint32(rest[l+4:]))
	cl := int(binary.BigEndian.Uint16(rest[l+8:]))
	if cl > auth.MaxCertBytes {
		return "", 0, 0, refuse(refusedMalformed, "hello: a certificate of %d bytes, more than the limit of %d", cl, auth.MaxCertBytes)
	}
	var cert, sig []byte
	if cl > 0 {
		cs := make([]byte, cl+ed25519.SignatureSize)
		if _, err := io.ReadFull(r, cs); err != nil {
			return "", 0, 0, refuse(refusedMalformed, "hello: %w", err)
		}
		cert, sig = cs[:cl], cs[cl:]
	}
	if id == nil {
		return ring, from, n, nil
	}
	if cl == 0 {
		return "", 0, 0, refuse(refusedNoCertificate, "hello without a node certificate: this endpoint takes only nodes of its cluster")
	}
	c, err := auth.VerifyNodeCert(id.ServicePublicKey, cert, now)
	if err != nil {
		return "", 0, 0, refuse(refusedUnauthentic, "hello: %w", err)
	}
	// This node's cluster as its own certificate says: both certificates
	// come from the same issuer, so they name clusters alike.
	want := id.Cluster
	if own, err := auth.VerifyNodeCert(id.ServicePublicKey, id.Cert, now); err == nil {
		want = own.Cluster
	}
	if c.Cluster != want {
		return "", 0, 0, refuse(refusedOtherCluster, "hello from node %s of cluster %q, not of this node's cluster %q", c.Node, c.Cluster, want)
	}
	if !ed25519.Verify(ed25519.PublicKey(c.PublicKey), signed(nonce, h.Bytes()), sig) {
		return "", 0, 0, refuse(refusedUnauthentic, "hello from node %s: its signature of this connection's challenge does not verify", c.Node)
	}
	return ring, from, n, nil
}
