// Package creds is the CLI's side of authentication: the credentials file
// that `loom auth login` and `loom up` write (one entry per gateway, in the
// user's config directory, mode 0600), and Source, which finds the
// credential a command sends to its gateway (LOOM_TOKEN, the login daemon,
// the file) and refreshes an expired access token on the way.
package creds

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Entry is what the CLI keeps for one gateway: a long-lived credential (an
// API key, or the refresh token of an OIDC login) and the last access token
// it got with it.
type Entry struct {
	// APIKey is the whole key ("lk_<id>.<secret>"), when the login used one.
	APIKey string `json:"api_key,omitempty"`
	// RefreshToken gets a new access token once (an OIDC login's).
	RefreshToken string `json:"refresh_token,omitempty"`
	// AccessToken and ExpireTime are the token sent, until it expires.
	AccessToken string    `json:"access_token,omitempty"`
	ExpireTime  time.Time `json:"expire_time,omitzero"`
	// Principal ("users/alice") and User ("alice") are who the gateway
	// said the credential is, at login: what the CLI shows and names as the
	// owner of what it submits (the gateway checks the credential anyway).
	Principal string `json:"principal,omitempty"`
	User      string `json:"user,omitempty"`
}

// file is the credentials file's content.
type file struct {
	Version  int               `json:"version"`
	Gateways map[string]*Entry `json:"gateways"`
}

// FileName is the credentials file's name in the config directory.
const FileName = "credentials.json"

// Dir is the CLI's config directory: LOOM_CONFIG_DIR (getenv looks it up;
// tests point it at a temporary directory), else os.UserConfigDir()/loom
// ($XDG_CONFIG_HOME/loom, ~/.config/loom).
func Dir(getenv func(string) string) (string, error) {
	if d := getenv("LOOM_CONFIG_DIR"); d != "" {
		return d, nil
	}
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory for the credentials file (%v); set LOOM_CONFIG_DIR or LOOM_TOKEN", err)
	}
	return filepath.Join(base, "loom"), nil
}

// Store is the credentials file in one directory. Its methods may be
// called from several goroutines and several processes: writes replace the
// file whole (rename), and Lock serialises read-modify-write cycles
// between processes.
type Store struct {
	dir string
}

// Open returns the store in dir; nothing is read or made until used.
func Open(dir string) *Store { return &Store{dir: dir} }

// Path is the credentials file's path.
func (s *Store) Path() string { return filepath.Join(s.dir, FileName) }

// read reads the file; a missing file is empty. A file that group or
// others may read is refused, as ssh refuses a private key: its tokens
// would be anyone's.
func (s *Store) read() (*file, error) {
	f := &file{Version: 1, Gateways: map[string]*Entry{}}
	path := s.Path()
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("credentials file %s has mode %v: other users could read your credentials; run `chmod 600 %s` (and log in again if they may have)", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("credentials file %s is not valid JSON (%v); remove it and run `loom auth login` again", path, err)
	}
	if f.Gateways == nil {
		f.Gateways = map[string]*Entry{}
	}
	return f, nil
}

// write replaces the file with f: a temporary file of mode 0600 in the
// same directory (made 0700 when missing), renamed over it.
func (s *Store) write(f *file) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".credentials-*") // mode 0600
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.Path())
	}
	if err != nil {
		return fmt.Errorf("credentials: write %s: %w", s.Path(), err)
	}
	return nil
}

// Get returns the entry for gateway, nil when there is none.
func (s *Store) Get(gateway string) (*Entry, error) {
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	return f.Gateways[gateway], nil
}

// Put sets the entry for gateway.
func (s *Store) Put(gateway string, e *Entry) error {
	f, err := s.read()
	if err != nil {
		return err
	}
	f.Gateways[gateway] = e
	return s.write(f)
}

// Delete removes the entry for gateway and says whether there was one.
func (s *Store) Delete(gateway string) (bool, error) {
	f, err := s.read()
	if err != nil {
		return false, err
	}
	if _, ok := f.Gateways[gateway]; !ok {
		return false, nil
	}
	delete(f.Gateways, gateway)
	return true, s.write(f)
}

// Lock takes an exclusive lock on the store between processes (flock on
// a lock file beside the credentials file) and returns what releases it:
// two commands refreshing the same token at once would use up one refresh
// token twice, and the second would fail.
func (s *Store) Lock() (unlock func(), err error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, ".credentials.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("credentials: lock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		_ = f.Close()
	}, nil
}
