package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/loom-ml/loom/cmd/loom/stack"
)

// upRecord is what a `loom up` records in its data directory
// (upRecordFile) once it is up: where its listeners are, so that the CLI
// finds the gateway of the `loom up` of LOOM_DATA_DIR (defaultGateway)
// and the next `loom up` knows which ports the agents it left talk to.
// It stays after `loom up` exits; only a running one's counts for the CLI.
type upRecord struct {
	// PortBase is its --port-base; 0 when it ran on addresses it was
	// given otherwise (tests: free ports).
	PortBase int `json:"port_base,omitempty"`
	// Gateway, REST and Broker are its gateway's gRPC and REST addresses
	// and its broker's (the node agents' link to it).
	Gateway string `json:"gateway"`
	REST    string `json:"rest"`
	Broker  string `json:"broker"`
}

// upRecordFile is where a `loom up` records its addresses in its data
// directory.
func upRecordFile(dataDir string) string { return filepath.Join(dataDir, "loom-up.json") }

// writeUpRecord writes r to dataDir's record, whole or not at all (a
// reader never sees half of it).
func writeUpRecord(dataDir string, r upRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dataDir, ".loom-up-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), upRecordFile(dataDir))
}

// readUpRecord reads dataDir's record; ok is false when there is none
// that parses.
func readUpRecord(dataDir string) (upRecord, bool) {
	b, err := os.ReadFile(upRecordFile(dataDir))
	if err != nil {
		return upRecord{}, false
	}
	var r upRecord
	if json.Unmarshal(b, &r) != nil || r.Gateway == "" {
		return upRecord{}, false
	}
	return r, true
}

// dataDirFrom is the default data directory as getenv tells it:
// LOOM_DATA_DIR, else ~/.loom.
func dataDirFrom(getenv func(string) string) string {
	if d := getenv("LOOM_DATA_DIR"); d != "" {
		return d
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".loom")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".loom")
	}
	return ".loom"
}

// defaultGateway is the gateway a command talks to without --gateway:
// LOOM_GATEWAY; else the gateway of the `loom up` running with the
// default data directory (LOOM_DATA_DIR, else ~/.loom), which may have
// been given other ports (--port-base); else DefaultGateway.
func (a *app) defaultGateway() string { return a.gatewayOf(dataDirFrom(a.getenv)) }

// gatewayOf is the gateway of the `loom up` of dataDir for a command not
// given --gateway: LOOM_GATEWAY; else the one its running `loom up`
// recorded there, when the record is trusted (readTrustedUpRecord); else
// DefaultGateway.
func (a *app) gatewayOf(dataDir string) string {
	if g := a.getenv("LOOM_GATEWAY"); g != "" {
		return g
	}
	if dir, err := filepath.Abs(dataDir); err == nil {
		if _, running := runningUp(dir); running {
			if r, ok := a.readTrustedUpRecord(dir); ok {
				return r.Gateway
			}
		}
	}
	return DefaultGateway
}

// upCommandHint is the `loom up` to suggest when the default gateway does
// not answer: with the --port-base of the data directory's last `loom up`
// (its record stays after it stops) when that was not the default, since
// its node agents and clients expect those ports, and a plain `loom up`
// would take others (and refuse while those agents run). "loom up" when
// the gateway was chosen otherwise or there is no trusted record.
func (a *app) upCommandHint() string {
	if a.gateway != DefaultGateway || a.getenv("LOOM_GATEWAY") != "" {
		return "loom up"
	}
	dir, err := filepath.Abs(dataDirFrom(a.getenv))
	if err != nil {
		return "loom up"
	}
	if r, ok := a.readTrustedUpRecord(dir); ok {
		return "loom up" + portBaseFlag(r.PortBase)
	}
	return "loom up"
}

// readTrustedUpRecord reads dir's record when the CLI may send its
// credentials to its gateway without being told to: the record is owned
// by this user or root and writable by no one else, and names a loopback
// address (where `loom up` listens). A data directory others can write to
// (LOOM_DATA_DIR pointed at a shared one) must not let them steer the CLI,
// and the API key it sends, to a gateway of their own. The owner and mode
// are those of the file read (one open file, not the path twice): in such
// a directory the path may name another file by the time it is checked.
func (a *app) readTrustedUpRecord(dir string) (upRecord, bool) {
	f, err := os.Open(upRecordFile(dir))
	if err != nil {
		return upRecord{}, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return upRecord{}, false
	}
	if a.upRecordRead != nil {
		a.upRecordRead(dir)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 {
		return upRecord{}, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || (st.Uid != 0 && int(st.Uid) != os.Geteuid()) {
		return upRecord{}, false
	}
	var r upRecord
	if json.Unmarshal(b, &r) != nil || r.Gateway == "" {
		return upRecord{}, false
	}
	host, _, err := net.SplitHostPort(r.Gateway)
	if err != nil {
		return upRecord{}, false
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return upRecord{}, false
	}
	return r, true
}

// upPortBase is `loom up`'s port base: --port-base when given, else
// LOOM_UP_PORT_BASE, else stack.DefaultPortBase; an error names the flag
// or variable and the limits.
func (a *app) upPortBase(flagSet bool, flagValue int) (int, error) {
	base, from := flagValue, "--port-base"
	if !flagSet {
		v := a.getenv("LOOM_UP_PORT_BASE")
		if v == "" {
			return stack.DefaultPortBase, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, usagef("LOOM_UP_PORT_BASE=%q is not a port number: give one from %d to %d, e.g. 8000", v, stack.MinPortBase, stack.MaxPortBase)
		}
		base, from = n, "LOOM_UP_PORT_BASE"
	}
	if base < stack.MinPortBase || base > stack.MaxPortBase {
		return 0, usagef("%s %d is out of range: it must be from %d to %d (the ports run from base+70 to base+%d), e.g. 8000",
			from, base, stack.MinPortBase, stack.MaxPortBase, 65535-stack.MaxPortBase)
	}
	return base, nil
}

// portBaseFlag is " --port-base N" when base is not the default, so that a
// command printed for the user to run next gets the same ports; ""
// otherwise (and for 0, ports given otherwise).
func portBaseFlag(base int) string {
	if base == 0 || base == stack.DefaultPortBase {
		return ""
	}
	return fmt.Sprintf(" --port-base %d", base)
}

// nextPortBase is a port base to suggest instead of base: 1000 above,
// else 1000 below.
func nextPortBase(base int) int {
	if base+1000 <= stack.MaxPortBase {
		return base + 1000
	}
	return base - 1000
}

// agentsFollow refuses a `loom up` on dataDir with addrs while node agents
// that an earlier `loom up` of dataDir left run with other ports: they
// talk to the broker and gateway they were started with, and would be
// cut off from this one (or reach another Loom's on those ports).
func agentsFollow(dataDir string, addrs stack.Addrs) error {
	r, ok := readUpRecord(dataDir)
	if !ok || addrs.Gateway == "" || (r.Gateway == addrs.Gateway && r.Broker == addrs.Broker) {
		return nil
	}
	left, err := stack.Agents(dataDir)
	if err != nil || len(left) == 0 {
		return nil
	}
	was := "--gateway " + r.Gateway
	if r.PortBase != 0 {
		was = fmt.Sprintf("--port-base %d", r.PortBase)
	}
	return fmt.Errorf("%d %s of %s still %s the ports of the last `loom up` there (%s, gateway %s), not these (gateway %s): "+
		"start it as before, `loom up%s%s`, or end %s first with `loom down%s`",
		len(left), plural(len(left), "node agent", "node agents"), dataDir, plural(len(left), "uses", "use"), was, r.Gateway, addrs.Gateway,
		dataDirFlag(dataDir), portBaseFlag(r.PortBase), plural(len(left), "it", "them"), dataDirFlag(dataDir))
}

// upPortError is `loom up`'s error for a failed start with addrs (from
// base) on dataDir: one that says a port of it is taken names the port,
// what wanted it and --port-base, with a base to try.
func upPortError(addrs stack.Addrs, base int, dataDir string, err error) error {
	l, ok := addrs.InUse(err)
	if !ok {
		return fmt.Errorf("start Loom: %w", err)
	}
	// The listen error alone, under the words that say it already.
	cause := err
	if pe := (*stack.PortInUseError)(nil); errors.As(err, &pe) {
		cause = pe.Err
	}
	return fmt.Errorf("start Loom: %s, for %s, is in use by another program (another `loom up`?): "+
		"give this one other ports with --port-base (LOOM_UP_PORT_BASE; now %d), e.g. `loom up%s --port-base %d`\n(%w)",
		l.Addr, l.Name, base, dataDirFlag(dataDir), nextPortBase(base), cause)
}
