package bus

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is how a Loom process authenticates to Kafka and protects its
// connections: SASL (PLAIN or SCRAM-SHA-256/512, one user per service) and
// TLS. Nil or zero: plaintext without authentication (the embedded broker
// on loopback).
type Security struct {
	SASL sasl.Mechanism
	TLS  *tls.Config
}

// KafkaOptions are a deployment's Kafka security settings as the
// LOOM_KAFKA_* variables give them (config.Common).
type KafkaOptions struct {
	// SASLMechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
	SASLMechanism, User, Password string
	// TLSCA is a PEM bundle of the brokers' CAs; TLSCert and TLSKey a
	// client certificate (mutual TLS). Any of them turns TLS on.
	TLSCA, TLSCert, TLSKey string
	// TLS turns TLS on with the system's CAs when no file is given.
	TLS bool
}

// NewSecurity builds Security from o; nil when o asks for nothing.
func NewSecurity(o KafkaOptions) (*Security, error) {
	var s Security
	switch m := strings.ToUpper(strings.TrimSpace(o.SASLMechanism)); m {
	case "":
	case "PLAIN":
		s.SASL = plain.Mechanism{Username: o.User, Password: o.Password}
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if m == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		mech, err := scram.Mechanism(algo, o.User, o.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka SASL %s: %w", m, err)
		}
		s.SASL = mech
	default:
		return nil, fmt.Errorf("kafka SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", o.SASLMechanism)
	}
	if s.SASL != nil && o.User == "" {
		return nil, fmt.Errorf("kafka SASL %s: a user is required (LOOM_KAFKA_SASL_USER)", o.SASLMechanism)
	}
	tc, err := TLSConfig(o.TLS, o.TLSCA, o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("kafka TLS: %w", err)
	}
	s.TLS = tc
	if s.SASL == nil && s.TLS == nil {
		return nil, nil
	}
	return &s, nil
}

// TLSConfig is a client TLS config from PEM files: ca (the servers' CAs;
// "" the system's), cert and key (a client certificate, both or neither).
// Nil when on is false and no file is given.
func TLSConfig(on bool, ca, cert, key string) (*tls.Config, error) {
	if !on && ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", ca)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("a client certificate needs both its certificate and its key file")
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// transport returns t with s's SASL and TLS.
func (s *Security) transport(t *kafka.Transport) *kafka.Transport {
	if s != nil {
		t.SASL, t.TLS = s.SASL, s.TLS
	}
	return t
}

// Transport returns a kafka-go Transport with s (nil: plaintext), for
// clients of Loom's brokers outside this package (a service's start-up
// ping).
func (s *Security) Transport() *kafka.Transport { return s.transport(&kafka.Transport{}) }

// Dialer returns a kafka-go reader's Dialer with s (nil: plaintext), for
// readers of Loom's brokers outside this package (the bridge's ingress
// reads raw CloudEvents, not envelopes).
func (s *Security) Dialer() *kafka.Dialer { return s.dialer() }

// dialer is the reader's dialer with s.
func (s *Security) dialer() *kafka.Dialer {
	d := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	if s != nil {
		d.SASLMechanism, d.TLS = s.SASL, s.TLS
	}
	return d
}
