package scan

import (
	"net"
	"strconv"
	"unicode"

	"github.com/loom-ml/loom/libs/errs"
)

// MaxCheckAddrBytes bounds an agent's check_addr: a DNS name is at most
// 253 bytes, with ":65535" this leaves room; anything longer is not an
// address, and every all-reduce's RunHealthCheck carries its ring's.
const MaxCheckAddrBytes = 255

// CheckAddr checks an agent's advertised check endpoint
// (AgentRegistered.check_addr): its ring neighbour connects to it, so it
// must be host:port (an IPv6 host in brackets), at most MaxCheckAddrBytes,
// with a port from 1 to 65535, a host, and no control or space characters.
// A refusal is an *errs.InvalidError naming check_addr.
//
// The host is not compared with the node's address: the provisioner's node
// record carries none (a hostname is a scheduler's name, not an address),
// and on the local provider every agent listens on 127.0.0.1.
func CheckAddr(addr string) error {
	if len(addr) > MaxCheckAddrBytes {
		return errs.Invalid("check_addr", "at most %d bytes, got %d", MaxCheckAddrBytes, len(addr))
	}
	for _, r := range addr {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			return errs.Invalid("check_addr", "must not hold control or space characters: %q", addr)
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errs.Invalid("check_addr", "want host:port: %q", addr)
	}
	if host == "" {
		return errs.Invalid("check_addr", "want host:port, with a host: %q", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return errs.Invalid("check_addr", "want a port from 1 to 65535: %q", addr)
	}
	return nil
}
