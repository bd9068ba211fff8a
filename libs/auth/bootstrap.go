package auth

import "time"

// BootstrapIssuerName is the iss of node bootstrap tokens.
const BootstrapIssuerName = "loom-bootstrap"

// NewBootstrapIssuer returns the Issuer of node bootstrap tokens: keyed by
// DeriveKey(serviceSecret, PurposeBootstrap), so that the provisioner that
// mints them and the gateway that checks them share only the services'
// secret. now is the clock (nil: time.Now).
func NewBootstrapIssuer(serviceSecret []byte, now func() time.Time) (*Issuer, error) {
	return NewIssuer(DeriveKey(serviceSecret, PurposeBootstrap), BootstrapIssuerName, now)
}

// MintBootstrapToken mints a one-time bootstrap token for one launch of
// node (its full name) in cluster (full name) and pool, valid for ttl
// (<= 0: DefaultBootstrapLifetime). The gateway's RegisterNode accepts it
// once, for that node of that pool only.
func MintBootstrapToken(iss *Issuer, node, cluster, pool string, ttl time.Duration) (string, time.Time, error) {
	if ttl <= 0 {
		ttl = DefaultBootstrapLifetime
	}
	return iss.Issue(Claims{Use: UseBootstrap, Kind: KindNode.String(), Node: node, Cluster: cluster, Pool: pool,
		RegisteredClaims: ForSubject(NodeName(node))}, ttl)
}
