package embedded

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Ports FreePort draws from: [minPickedPort, the kernel's ephemeral range).
const (
	minPickedPort = 10000
	// pickAttempts bounds the draws before FreePort lets the kernel pick.
	pickAttempts = 50
)

// portLocksFile is where FreePort's processes record, by a lock on the
// byte at a port's offset, the ports they hold picked.
var portLocksFile = filepath.Join(os.TempDir(), "loom-picked-ports.lock")

var picked struct {
	sync.Mutex
	file  *os.File         // open for the process's life: it holds the locks
	ports map[int]struct{} // this process's picks (its own locks do not exclude it)
	low   int              // the ephemeral range's first port; 0: unread
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server that must know its address before it binds (a child
// redis-server, a service configured with its address).
//
// A port the kernel picks (a bind to :0) can be handed out again before
// the server binds it, to the next outgoing connection or :0 bind of any
// process; with many tests in parallel that happened (EADDRINUSE). So the
// port is drawn at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), which the kernel never hands out, and it
// stays reserved for the rest of the calling process's life: an OFD lock on
// its byte of portLocksFile keeps other processes' FreePort off it, and a
// set this one's. Where the range or the file cannot be had, the kernel
// picks, as before.
func FreePort() (int, error) {
	picked.Lock()
	defer picked.Unlock()
	if picked.low == 0 {
		picked.low = ephemeralLow()
	}
	if picked.file == nil && picked.low > minPickedPort {
		if f, err := os.OpenFile(portLocksFile, os.O_RDWR|os.O_CREATE, 0o666); err == nil {
			picked.file = f
			picked.ports = map[int]struct{}{}
		}
	}
	if picked.file != nil {
		for range pickAttempts {
			p := minPickedPort + rand.IntN(picked.low-minPickedPort)
			if _, mine := picked.ports[p]; mine || !lockPort(picked.file, p) {
				continue
			}
			if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
				_ = ln.Close()
				picked.ports[p] = struct{}{}
				return p, nil
			}
			unlockPort(picked.file, p) // bound by something else
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// where it cannot be read (not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= 0 || low > 65535 {
		return 0
	}
	return low
}
