package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/cmd/loom/internal/authd"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/config"
)

// authdSocketFile is the login daemon's socket's name in a `loom up`'s
// data directory.
const authdSocketFile = "authd.sock"

// authdSocketIn is the login daemon's socket of a `loom up` with dataDir.
func authdSocketIn(dataDir string) string { return filepath.Join(dataDir, authdSocketFile) }

// loginAuthdSocket is the login daemon a `loom clusters login` shell's
// Slurm commands ask: LOOM_AUTHD_SOCKET, else the one of the `loom up`
// that serves the cluster whose shared home is home (upSocketOf), else
// the one of `loom up` with the default data directory; "" for none (the
// commands then have the caller's LOOM_TOKEN or saved login alone, and
// the login's HOME is not the caller's, so a saved login is not found).
func (a *app) loginAuthdSocket(home string) string {
	if s := a.getenv("LOOM_AUTHD_SOCKET"); s != "" {
		return s
	}
	for _, p := range []string{upSocketOf(home), authdSocketIn(defaultDataDir())} {
		if p == "" {
			continue
		}
		p, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().Type() == os.ModeSocket {
			return p
		}
	}
	return ""
}

// upSocketOf is the login daemon's socket of the `loom up` whose local
// provider made the shared home home (<data dir>/provisioner/clusters/<id>/home,
// stack and the local provider), or "" when home is not one: a `loom up
// --data-dir X` has its socket in X, not in the default data directory.
func upSocketOf(home string) string {
	cluster := filepath.Dir(filepath.Clean(home))
	clusters := filepath.Dir(cluster)
	prov := filepath.Dir(clusters)
	if filepath.Base(home) != "home" || filepath.Base(clusters) != "clusters" || filepath.Base(prov) != "provisioner" {
		return ""
	}
	return authdSocketIn(filepath.Dir(prov))
}

// runAuthd serves the login daemon on socket for the gateway at gateway,
// with the login key loginKey returns, until stop is called (or ctx ends).
func runAuthd(ctx context.Context, socket, gateway string, loginKey func() (string, error), log *slog.Logger) (stop func(), err error) {
	ln, err := authd.Listen(socket)
	if err != nil {
		return nil, err
	}
	// No per-RPC credential on this connection: each call carries the
	// login key alone.
	conn, err := grpc.NewClient(gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	srv := &authd.Server{Conn: conn, LoginKey: loginKey, Log: log}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil && log != nil {
			log.Error("login daemon stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
		_ = conn.Close()
	}, nil
}

func (a *app) authdCommand() *cobra.Command {
	var dataDir, socket, keyFile string
	cmd := &cobra.Command{
		Use:   "authd",
		Short: "Run the login daemon: local users get a token for their own OS account",
		Long: `Run Loom's login daemon on a Unix socket (mode 0666: every local user may
ask). Each connection gets a short-lived token for the OS account of the
process that connected, which the kernel reports (SO_PEERCRED), never for a
name the client gives: as munge vouches for a uid to Slurm. The daemon asks
the gateway (--gateway) with the login key, which the gateway writes at its
first start (-login-key-file; "loom up" keeps it in <data dir>/keys/login.key).
Without --gateway it asks LOOM_GATEWAY, else the gateway of the "loom up"
running with --data-dir, else ` + DefaultGateway + `.

"loom up" runs one on <data dir>/authd.sock; "loom clusters login" points its
shell's Slurm commands at it (LOOM_AUTHD_SOCKET). Run this on a login node
that is not the "loom up" machine, with a copy of the login key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			if socket == "" {
				socket = authdSocketIn(abs)
			}
			if keyFile == "" {
				keyFile = stack.KeysIn(abs).Login
			}
			if _, err := stack.ReadKeyFile(keyFile); err != nil {
				return fmt.Errorf("login key: %w (the gateway writes it at its first start with -login-key-file; give its copy with --login-key-file)", err)
			}
			// The gateway of the data directory's `loom up`, as other
			// commands follow LOOM_DATA_DIR's: --gateway's default is the
			// default data directory's, which --data-dir may not be.
			gateway := a.gateway
			if !cmd.Flags().Changed("gateway") {
				gateway = a.gatewayOf(abs)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			stop, err := runAuthd(cmd.Context(), socket, gateway, func() (string, error) { return stack.ReadKeyFile(keyFile) }, log)
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "Login daemon on %s for the gateway at %s. Press Ctrl-C to stop.\n", socket, gateway)
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDirFrom(a.getenv), "the data directory of the \"loom up\" whose gateway it serves (LOOM_DATA_DIR)")
	cmd.Flags().StringVar(&socket, "socket", config.Env("LOOM_AUTHD_SOCKET", ""), "Unix socket to listen on (LOOM_AUTHD_SOCKET; default <data dir>/authd.sock)")
	cmd.Flags().StringVar(&keyFile, "login-key-file", config.Env("LOOM_GATEWAY_LOGIN_KEY_FILE", ""), "the login key (default <data dir>/keys/login.key)")
	return cmd
}
