package creds

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/authd"
	"github.com/loom-ml/loom/libs/auth"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// RefreshBefore is how long before its expiry an access token is replaced:
// a token about to expire could expire on its way.
const RefreshBefore = time.Minute

// Where a credential came from (Source.From).
const (
	FromEnv   = "LOOM_TOKEN"
	FromAuthd = "login daemon"
	FromFile  = "credentials file"
	FromNone  = "none"
)

// AuthdRefusal begins the message of Token's error when the login daemon
// answers but gives no token (a refusal, a bad answer): the error reaches
// the CLI as a call's status, whose message alone says it was not the
// gateway's refusal.
const AuthdRefusal = "the login daemon at "

// Source finds the credential the CLI sends to one gateway, in this order:
//  1. LOOM_TOKEN, when set (a workload's token, a script's key);
//  2. the login daemon on the Unix socket Authd, when set and there (the
//     Slurm commands on a login node: the OS establishes the uid);
//  3. the credentials file's entry for Gateway, refreshing its access
//     token with the stored refresh token or API key when it has expired.
//
// With none of them the calls go without a credential (anonymous), and the
// gateway decides. The zero value is not usable: set Gateway and Getenv,
// and Conn before the first call that needs a refresh.
type Source struct {
	// Gateway is the address the credential is for (the file's key).
	Gateway string
	// Getenv looks LOOM_TOKEN up.
	Getenv func(string) string
	// Store is the credentials file; nil: none.
	Store *Store
	// Authd is the login daemon's socket; "": none.
	Authd string
	// Conn reaches Gateway, for CreateToken when a token needs renewing;
	// calls on it with this Source's Credentials are fine (renewing sends
	// its own credential).
	Conn grpc.ClientConnInterface
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu        sync.Mutex
	token     string
	expire    time.Time // zero: does not expire (LOOM_TOKEN, an API key)
	user      string
	principal string
	from      string
}

func (s *Source) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Token returns the credential to send: "" with no error when there is
// none. An error says what to do (log in again).
func (s *Source) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.from != "" && (s.expire.IsZero() || s.now().Add(RefreshBefore).Before(s.expire)) {
		return s.token, nil
	}
	if t := s.getenv("LOOM_TOKEN"); t != "" {
		s.set(t, time.Time{}, "", "", FromEnv)
		return t, nil
	}
	if s.Authd != "" {
		a, err := authd.Ask(ctx, s.Authd)
		switch {
		case err == nil:
			s.set(a.AccessToken, a.ExpireTime, a.User, a.Principal, FromAuthd)
			return a.AccessToken, nil
		case !absent(err):
			return "", status.Errorf(codes.Unauthenticated, "%s%s: %v", AuthdRefusal, s.Authd, err)
		}
	}
	if s.Store != nil {
		e, err := s.fromStore(ctx)
		if err != nil {
			return "", err
		}
		if e != nil {
			tok, exp := e.AccessToken, e.ExpireTime
			if tok == "" { // a gateway that mints no tokens takes the key itself
				tok, exp = e.APIKey, time.Time{}
			}
			s.set(tok, exp, e.User, e.Principal, FromFile)
			return tok, nil
		}
	}
	s.set("", time.Time{}, "", "", FromNone)
	return "", nil
}

// absent says whether err means there is no login daemon at the socket
// (no such file, nobody listening): the next source is tried.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

func (s *Source) getenv(k string) string {
	if s.Getenv == nil {
		return ""
	}
	return s.Getenv(k)
}

// set caches a credential; the caller holds s.mu.
func (s *Source) set(tok string, exp time.Time, user, principal, from string) {
	s.token, s.expire, s.user, s.principal, s.from = tok, exp, user, principal, from
}

// Identity returns who the credential says the caller is, as far as the
// source knows without asking the gateway: the login daemon's answer or
// the file's entry; ok is false for LOOM_TOKEN and no credential (ask
// WhoAmI). Call it after Token.
func (s *Source) Identity() (user, principal string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.user, s.principal, s.user != ""
}

// From says where the last credential came from: FromEnv, FromAuthd,
// FromFile or FromNone ("" before the first Token).
func (s *Source) From() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.from
}

// fresh says whether e's access token is good for a while yet.
func (s *Source) fresh(e *Entry) bool {
	return e.AccessToken != "" && s.now().Add(RefreshBefore).Before(e.ExpireTime)
}

// fromStore returns the file's entry for the gateway with a usable access
// token (renewed when needed), or nil when there is no entry.
func (s *Source) fromStore(ctx context.Context) (*Entry, error) {
	e, err := s.Store.Get(s.Gateway)
	if err != nil || e == nil || s.fresh(e) {
		return e, err
	}
	unlock, err := s.Store.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another command may have renewed it while this one waited.
	if e, err = s.Store.Get(s.Gateway); err != nil || e == nil || s.fresh(e) {
		return e, err
	}
	tok, err := s.renew(ctx, e)
	if err != nil {
		return nil, err
	}
	if tok == nil { // the gateway mints no tokens: the API key is the credential
		e.AccessToken, e.ExpireTime = "", time.Time{}
		return e, nil
	}
	Apply(e, tok)
	if err := s.Store.Put(s.Gateway, e); err != nil {
		return nil, err
	}
	return e, nil
}

// Apply records a CreateToken answer in e.
func Apply(e *Entry, tok *loomv1.Token) {
	e.AccessToken = tok.GetAccessToken()
	e.ExpireTime = tok.GetExpireTime().AsTime()
	if r := tok.GetRefreshToken(); r != "" {
		e.RefreshToken = r
	}
	if p := tok.GetPrincipal(); p != nil {
		e.Principal, e.User = p.GetName(), p.GetUser()
	}
}

// renew gets a new access token for e: with its refresh token (used up;
// the answer carries the next), else with its API key. It answers nil,
// nil when the gateway does not mint tokens (Unimplemented) and e has an
// API key, which is then sent as it is.
func (s *Source) renew(ctx context.Context, e *Entry) (*loomv1.Token, error) {
	if s.Conn == nil {
		return nil, errors.New("credentials: no connection to renew the access token on")
	}
	cl := loomv1.NewAuthServiceClient(s.Conn)
	var tok *loomv1.Token
	var err error
	switch {
	case e.RefreshToken != "":
		tok, err = cl.CreateToken(WithCredential(ctx, ""), &loomv1.CreateTokenRequest{RefreshToken: e.RefreshToken})
	case e.APIKey != "":
		tok, err = cl.CreateToken(WithCredential(ctx, e.APIKey), &loomv1.CreateTokenRequest{})
		if status.Code(err) == codes.Unimplemented {
			return nil, nil
		}
	default:
		return nil, status.Errorf(codes.Unauthenticated, "your login to %s has expired: run `loom auth login --gateway %s`", s.Gateway, s.Gateway)
	}
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			return nil, status.Errorf(codes.Unauthenticated, "your login to %s has expired or was revoked (%s): run `loom auth login --gateway %s`", s.Gateway, status.Convert(err).Message(), s.Gateway)
		}
		return nil, fmt.Errorf("renew the access token for %s: %w", s.Gateway, err)
	}
	return tok, nil
}

type overrideKey struct{}

// WithCredential returns ctx whose calls, on a connection with a Source's
// Credentials, send cred instead of the Source's ("" sends none): what
// `loom auth login` and renewing a token do.
func WithCredential(ctx context.Context, cred string) context.Context {
	return context.WithValue(ctx, overrideKey{}, cred)
}

// Credentials is the per-RPC credential that sends the Source's credential
// ("authorization: Bearer ...", auth.Bearer's form) on every call, or
// nothing when it has none.
func (s *Source) Credentials() credentials.PerRPCCredentials { return perRPC{s} }

type perRPC struct{ s *Source }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (p perRPC) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	cred, ok := ctx.Value(overrideKey{}).(string)
	if !ok {
		var err error
		if cred, err = p.s.Token(ctx); err != nil {
			return nil, err
		}
	}
	if cred == "" {
		return nil, nil
	}
	return auth.Bearer(cred).GetRequestMetadata(ctx, uri...)
}

// RequireTransportSecurity implements credentials.PerRPCCredentials:
// false, as auth.Bearer's (loopback needs no certificate).
func (perRPC) RequireTransportSecurity() bool { return false }
