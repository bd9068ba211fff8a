// Command loom is Loom's command line: it manages clusters, jobs and models
// through the gateway, and runs Loom itself on this machine (`loom up`,
// `loom demo`).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/cmd/loom/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
